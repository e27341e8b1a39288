"""Provider objects → (event type, identity, payload) for the payments machines.

The identity of a provider fact is ``<object id>:<status>``, and the payload is built only from the
provider object, so the same fact arriving by an effect's response, a webhook, a query or
reconciliation hashes the same: the first is applied, the others are ``already_applied``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .providers import IntentResult, RefundResult

INTENT_EVENTS = {"authorized": "authorized", "captured": "captured", "voided": "voided", "failed": "failed"}
REFUND_EVENTS = {"pending": "pending", "succeeded": "succeeded", "failed": "failed", "canceled": "failed"}


@dataclasses.dataclass(frozen=True)
class Fact:
    event_type: str
    identity: str
    payload: dict[str, Any]


def intent_fact(intent: IntentResult) -> Fact | None:
    """None while the provider has nothing final to say (requires_confirmation, processing, ...)."""
    event = INTENT_EVENTS.get(intent.observation)
    if event is None:
        return None
    amount = intent.amount_received if event == "captured" else intent.amount
    payload: dict[str, Any] = {
        "intent_id": intent.intent_id,
        "status": intent.status,
        "amount": amount,
        "currency": intent.currency,
    }
    if event == "failed":
        payload["decline_code"] = intent.last_error_code or ""
    return Fact(event, f"{intent.intent_id}:{intent.status}", payload)


def refund_fact(refund: RefundResult) -> Fact | None:
    event = REFUND_EVENTS.get(refund.status)
    if event is None:
        return None
    payload: dict[str, Any] = {
        "refund_id": refund.refund_id,
        "status": refund.status,
        "amount": refund.amount,
        "currency": refund.currency,
    }
    if event == "failed":
        payload["failure_reason"] = refund.failure_reason or refund.status
    return Fact(event, f"{refund.refund_id}:{refund.status}", payload)

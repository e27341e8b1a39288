"""The provider adapter interface: what payments needs from a card processor, and how calls fail.

Results are plain dataclasses (no SDK objects leak out). Failures are classified so callers never
guess: ``PaymentDeclined`` (the provider answered no), ``OutcomeUnknown`` (timeout, dropped connection,
5xx, a concurrent request on the same key: the effect may or may not have happened, so ask the
provider before doing anything else), ``PermanentProviderError`` (the request can never succeed as
sent; ``UnexpectedProviderState`` and ``NotFoundAtProvider`` are its common cases).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Protocol

# What the provider's PaymentIntent status means for our attempt.
INTENT_OBSERVATION = {
    "requires_payment_method": "failed",  # after a confirm: declined, a new payment method is needed
    "requires_confirmation": "requested",
    "requires_action": "requested",
    "processing": "requested",
    "requires_capture": "authorized",
    "succeeded": "captured",
    "canceled": "voided",
}


@dataclasses.dataclass(frozen=True)
class IntentResult:
    intent_id: str
    status: str
    amount: int
    amount_capturable: int
    amount_received: int
    currency: str
    metadata: dict[str, str]
    created: int
    last_error_code: str | None = None
    replayed: bool = False
    raw: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def observation(self) -> str:
        """requested | authorized | captured | voided | failed."""
        return INTENT_OBSERVATION.get(self.status, "requested")

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, replayed: bool = False) -> IntentResult:
        last_error = data.get("last_payment_error") or {}
        return cls(
            intent_id=data["id"],
            status=data["status"],
            amount=int(data["amount"]),
            amount_capturable=int(data.get("amount_capturable") or 0),
            amount_received=int(data.get("amount_received") or 0),
            currency=str(data["currency"]).lower(),
            metadata=dict(data.get("metadata") or {}),
            created=int(data.get("created") or 0),
            last_error_code=last_error.get("code"),
            replayed=replayed,
            raw=data,
        )


@dataclasses.dataclass(frozen=True)
class RefundResult:
    refund_id: str
    status: str  # pending | requires_action | succeeded | failed | canceled
    amount: int
    currency: str
    intent_id: str | None
    metadata: dict[str, str]
    created: int
    failure_reason: str | None = None
    replayed: bool = False
    raw: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, replayed: bool = False) -> RefundResult:
        return cls(
            refund_id=data["id"],
            status=data["status"],
            amount=int(data["amount"]),
            currency=str(data["currency"]).lower(),
            intent_id=data.get("payment_intent"),
            metadata=dict(data.get("metadata") or {}),
            created=int(data.get("created") or 0),
            failure_reason=data.get("failure_reason"),
            replayed=replayed,
            raw=data,
        )


class ProviderError(Exception):
    retryable = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        http_status: int | None = None,
        raw: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status
        self.raw = raw or {}


class PaymentDeclined(ProviderError):
    """The provider refused the payment (card_error). The intent, if any, is left retryable."""

    def __init__(
        self,
        message: str,
        *,
        decline_code: str | None = None,
        intent: IntentResult | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.decline_code = decline_code
        self.intent = intent


class OutcomeUnknown(ProviderError):
    """We do not know whether the provider acted. Resolve by querying, never by a blind resend."""

    retryable = True


class PermanentProviderError(ProviderError):
    """The request as sent can never succeed (bad parameters, auth, idempotency key reused differently)."""


class UnexpectedProviderState(PermanentProviderError):
    """The object is not in a state that allows the call (e.g. cancel after capture). Carries the object."""

    def __init__(self, message: str, *, intent: IntentResult | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.intent = intent


class NotFoundAtProvider(PermanentProviderError):
    pass


class IdempotencyKeyReused(PermanentProviderError):
    """Same key, different parameters: a bug on our side, never retry."""


class PaymentProvider(Protocol):
    """Every mutating call carries the caller's idempotency key (derived from the outbox effect key)."""

    name: str

    def create_intent(
        self,
        *,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
        payment_method: str | None = None,
        description: str | None = None,
    ) -> IntentResult: ...

    def retrieve_intent(self, intent_id: str) -> IntentResult: ...

    def capture_intent(
        self, intent_id: str, *, idempotency_key: str, amount: int | None = None
    ) -> IntentResult: ...

    def cancel_intent(
        self, intent_id: str, *, idempotency_key: str, reason: str | None = None
    ) -> IntentResult: ...

    def create_refund(
        self,
        *,
        intent_id: str,
        idempotency_key: str,
        amount: int | None = None,
        metadata: dict[str, str] | None = None,
        reason: str | None = None,
    ) -> RefundResult: ...

    def retrieve_refund(self, refund_id: str) -> RefundResult: ...

    def list_refunds(self, *, intent_id: str) -> list[RefundResult]: ...

    def iter_intents(self, *, created_gte: int | None = None) -> Iterator[IntentResult]: ...

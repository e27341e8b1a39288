"""The provider webhook inbox: verify the signature over the raw body, store the event verbatim under
the provider's event id, classify it through ``apply`` on the payment attempt or refund it names.

Concurrent deliveries of one event serialise on the inbox row: the first inserts and classifies it;
the others wait for its commit, then answer from the stored classification (``already_applied`` for
a fact that was applied, the same rejection otherwise), so the provider always gets a 200.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from django.conf import settings
from django.db import transaction

from workflow import clock
from workflow.errors import NotFound, SignatureInvalid, ValidationFailed
from workflow.inputs import parse_json_body
from workflow.models import STATE_CHANGING_RESULTS

from . import services
from .facts import intent_fact, refund_fact
from .models import PaymentAttempt, ProviderEvent, Refund
from .providers import IntentResult, RefundResult

PROVIDERS = ("stripe", "sandbox")  # both speak Stripe's event shape and Stripe-Signature scheme
ACTOR_PREFIX = "provider:"
ATTEMPT_EVENT_TYPES = {
    "payment_intent.amount_capturable_updated",
    "payment_intent.succeeded",
    "payment_intent.canceled",
    "payment_intent.payment_failed",
}
REFUND_EVENT_TYPES = {"refund.created", "refund.updated", "refund.failed", "charge.refund.updated"}


def verify_signature(
    *, raw_body: bytes, header: str | None, secrets: list[str], tolerance_seconds: int
) -> int:
    """Stripe's scheme: ``t=<unix>,v1=<hex hmac-sha256(secret, "t.body")>`` (several v1 during rotation).

    Any configured secret may match any v1 (secret rotation). Answers the signed timestamp.
    """
    if not header:
        raise SignatureInvalid("Missing Stripe-Signature header")
    timestamp: int | None = None
    signatures: list[str] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t":
            try:
                timestamp = int(value)
            except ValueError:
                raise SignatureInvalid("Malformed Stripe-Signature timestamp")
        elif key == "v1":
            signatures.append(value)
    if timestamp is None or not signatures:
        raise SignatureInvalid("Stripe-Signature needs a timestamp and at least one v1 signature")
    signed = f"{timestamp}.".encode() + raw_body
    expected = [hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest() for secret in secrets if secret]
    if not any(hmac.compare_digest(e, s) for e in expected for s in signatures):
        raise SignatureInvalid("No signature matches the expected signature for the payload")
    age = clock.now().timestamp() - timestamp
    if age > tolerance_seconds:
        raise SignatureInvalid(
            f"Timestamp outside the tolerance zone ({int(age)} s old, {tolerance_seconds} s allowed)",
            details={"tolerance_seconds": tolerance_seconds},
        )
    return timestamp


def _parse(raw_body: bytes) -> dict[str, Any]:
    try:
        event = parse_json_body(raw_body)  # strict: no NUL/lone surrogates (the event is stored verbatim)
    except ValueError as exc:
        raise ValidationFailed(f"webhook body is not JSON: {exc}")
    if not isinstance(event, dict):
        raise ValidationFailed("webhook body must be a JSON object")
    obj = (event.get("data") or {}).get("object") if isinstance(event.get("data"), dict) else None
    if (
        not isinstance(event.get("id"), str)
        or not event["id"]
        or not isinstance(event.get("type"), str)
        or not isinstance(obj, dict)
        or not isinstance(obj.get("id"), str)
    ):
        raise ValidationFailed(
            "webhook event needs id, type and data.object with an id",
            details={"fields": ["id", "type", "data.object.id"]},
        )
    if len(event["id"]) > 255:
        raise ValidationFailed("event id too long", details={"field": "id"})
    if len(event["type"]) > 100:  # the column's width: longer was a 500
        raise ValidationFailed("event type too long", details={"field": "type"})
    return event


def provider_event_receive(*, provider: str, raw_body: bytes, signature_header: str | None) -> dict[str, Any]:
    """Verify, store and classify one delivery. Answers the contract's event-style body."""
    if provider not in PROVIDERS:
        raise NotFound(f"unknown payment provider {provider!r}")
    verify_signature(
        raw_body=raw_body,
        header=signature_header,
        secrets=list(settings.STRIPE_WEBHOOK_SECRETS),
        tolerance_seconds=int(settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS),
    )
    event = _parse(raw_body)
    now = clock.now()
    with transaction.atomic():
        # ON CONFLICT DO NOTHING: a concurrent delivery of the same event waits here for the first's commit.
        ProviderEvent.objects.bulk_create(
            [
                ProviderEvent(
                    provider=provider,
                    event_id=event["id"],
                    event_type=event["type"],
                    raw_body=raw_body.decode(),
                    payload=event,
                    signature=signature_header or "",
                    received_at=now,
                    last_delivery_at=now,
                )
            ],
            ignore_conflicts=True,
        )
        stored = ProviderEvent.objects.select_for_update().get(provider=provider, event_id=event["id"])
        if stored.processed_at is not None:
            stored.deliveries += 1
            stored.last_delivery_at = now
            stored.save(update_fields=["deliveries", "last_delivery_at"])
            return _replayed_answer(stored)
        answer = _classify(provider, event)
        stored.processed_at = now
        stored.result = answer["result"]
        stored.detail = answer.get("detail") or ""
        stored.aggregate_type = answer.get("aggregate_type") or ""
        stored.aggregate_id = answer.get("aggregate_id")
        stored.transition_id = answer.get("transition_id")
        stored.answer = answer
        # raw_body and payload were written once on arrival and never change: leave them alone.
        stored.save(update_fields=["processed_at", "result", "detail", "aggregate_type", "aggregate_id",
                                   "transition_id", "answer"])
        return answer


def _replayed_answer(stored: ProviderEvent) -> dict[str, Any]:
    answer = dict(stored.answer)
    if answer.get("result") in STATE_CHANGING_RESULTS or answer.get("result") == "already_applied":
        answer["result"] = "already_applied"
    answer["replayed"] = True
    answer["related"] = []
    answer["detail"] = f"event {stored.event_id} was already received ({stored.deliveries} deliveries)"
    return answer


def _ignored(event: dict[str, Any], detail: str) -> dict[str, Any]:
    return {
        "result": "ignored",
        "state": None,
        "version": None,
        "transition_id": None,
        "replayed": False,
        "detail": detail,
        "event_id": event["id"],
        "aggregate_type": "",
        "aggregate_id": None,
        "related": [],
    }


def _answer(
    event: dict[str, Any], outcome, aggregate_type: str, aggregate_id: int, related: list
) -> dict[str, Any]:
    return {
        **outcome.as_dict(),
        "event_id": event["id"],
        "aggregate_type": aggregate_type,
        "aggregate_id": aggregate_id,
        "related": related,
    }


def _classify(provider: str, event: dict[str, Any]) -> dict[str, Any]:
    obj = event["data"]["object"]
    actor = f"{ACTOR_PREFIX}{provider}"
    reason = f"webhook {event['id']} ({event['type']})"
    if event["type"] in ATTEMPT_EVENT_TYPES:
        try:
            intent = IntentResult.from_dict(obj)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationFailed(f"data.object is not a PaymentIntent: {exc}")
        attempt = _attempt_for(intent)
        if attempt is None:
            return _ignored(
                event, f"no local payment attempt for {intent.intent_id}; kept for reconciliation"
            )
        fact = intent_fact(intent)
        if fact is None:
            return _ignored(event, f"{intent.intent_id} is {intent.status}: nothing final to record")
        outcome, related = services.payment_attempt_apply_fact(
            attempt_id=attempt.pk, fact=fact, actor=actor, reason=reason
        )
        return _answer(event, outcome, PaymentAttempt.aggregate_label(), attempt.pk, related)
    if event["type"] in REFUND_EVENT_TYPES:
        try:
            result = RefundResult.from_dict(obj)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationFailed(f"data.object is not a Refund: {exc}")
        refund = _refund_for(result)
        if refund is None:
            return _ignored(event, f"no local refund for {result.refund_id}; kept for reconciliation")
        fact = refund_fact(result)
        if fact is None:
            return _ignored(event, f"{result.refund_id} is {result.status}: nothing final to record")
        outcome, related = services.refund_apply_fact(
            refund_id=refund.pk, fact=fact, actor=actor, reason=reason
        )
        return _answer(event, outcome, Refund.aggregate_label(), refund.pk, related)
    return _ignored(event, f"event type {event['type']} is not acted on")


def _attempt_for(intent: IntentResult) -> PaymentAttempt | None:
    attempt = PaymentAttempt.objects.filter(provider_intent_id=intent.intent_id).first()
    if attempt is None and intent.metadata.get("ledgerflow_attempt"):
        try:
            attempt = PaymentAttempt.objects.filter(public_id=intent.metadata["ledgerflow_attempt"]).first()
        except ValueError:  # not a UUID
            attempt = None
    return attempt


def _refund_for(result: RefundResult) -> Refund | None:
    refund = Refund.objects.filter(provider_refund_id=result.refund_id).first()
    if refund is None and result.metadata.get("ledgerflow_refund"):
        try:
            refund = Refund.objects.filter(public_id=result.metadata["ledgerflow_refund"]).first()
        except ValueError:
            refund = None
        if refund is not None and result.metadata.get("try", "1") != str(refund.tries):
            return None  # an earlier, failed try's refund object: it does not govern the refund now
    return refund

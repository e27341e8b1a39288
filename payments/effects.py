"""Outbox handlers: the only code that calls the payment provider.

Each call carries an idempotency key derived from the outbox effect key (``item.payload
["idempotency_key"]``, which is the effect key itself or, for a re-promised call, the original call's
key). A call whose outcome is unknown (timeout, dropped answer, 5xx) is recorded as ``unknown`` with a
*query* promised; the handler then returns normally so that record commits with the delivery.
"""

from __future__ import annotations

import logging

from workflow.models import OutboxItem
from workflow.outbox import PermanentEffectError, RetryableEffectError, effect_handler

from . import services
from .models import (
    EFFECT_CANCEL_INTENT,
    EFFECT_CAPTURE_INTENT,
    EFFECT_CREATE_INTENT,
    EFFECT_CREATE_REFUND,
    EFFECT_QUERY_ATTEMPT,
    EFFECT_QUERY_REFUND,
    PaymentAttempt,
    Refund,
)
from .providers import (
    IntentResult,
    OutcomeUnknown,
    PaymentDeclined,
    PermanentProviderError,
    RefundResult,
    UnexpectedProviderState,
    get_provider,
)

logger = logging.getLogger(__name__)
ACTOR = "system:payments-worker"


def _key(item: OutboxItem) -> str:
    return item.payload.get("idempotency_key") or item.effect_key


def _summary(outcome) -> dict:
    return outcome.as_dict() if outcome is not None else {"result": "nothing final yet"}


def attempt_metadata(attempt: PaymentAttempt) -> dict[str, str]:
    return {
        "ledgerflow_attempt": str(attempt.public_id),
        "owner": f"{attempt.owner_type}:{attempt.owner_id}",
        "sequence": str(attempt.sequence),
    }


def create_intent_call(attempt: PaymentAttempt) -> IntentResult:
    """The create call, always with the same parameters and key, so a repeat is a replay at the provider."""
    return get_provider().create_intent(
        amount=attempt.amount,
        currency=attempt.currency,
        idempotency_key=attempt.effect_key("create"),
        metadata=attempt_metadata(attempt),
        payment_method=attempt.payment_method or None,
    )


def _record_create_answer(attempt: PaymentAttempt, call) -> dict:
    try:
        intent = call()
    except PaymentDeclined as declined:
        if declined.intent is not None:
            outcome, _ = services.payment_attempt_record_intent(
                attempt_id=attempt.pk, intent=declined.intent, actor=ACTOR
            )
        else:
            outcome, _ = services.payment_attempt_record_refusal(
                attempt_id=attempt.pk,
                identity=f"{attempt.effect_key('create')}:declined",
                error=declined.message,
                decline_code=declined.decline_code or "",
                actor=ACTOR,
            )
        return {"declined": declined.decline_code, **_summary(outcome)}
    except PermanentProviderError as refused:
        outcome, _ = services.payment_attempt_record_refusal(
            attempt_id=attempt.pk,
            identity=f"{attempt.effect_key('create')}:refused",
            error=f"{refused.code or ''} {refused.message}".strip(),
            actor=ACTOR,
        )
        return {"refused": refused.code, **_summary(outcome)}
    outcome, _ = services.payment_attempt_record_intent(attempt_id=attempt.pk, intent=intent, actor=ACTOR)
    return {"intent_id": intent.intent_id, "status": intent.status, **_summary(outcome)}


@effect_handler(EFFECT_CREATE_INTENT, max_attempts=8, base_delay_seconds=2)
def create_intent(item: OutboxItem) -> dict:
    attempt = PaymentAttempt.objects.get(pk=item.aggregate_id)
    try:
        return _record_create_answer(attempt, lambda: create_intent_call(attempt))
    except OutcomeUnknown as unknown:
        outcome = services.payment_attempt_record_unknown(
            attempt_id=attempt.pk, operation="create", error=unknown.message, actor=ACTOR
        )
        return {"unknown": unknown.message, **_summary(outcome)}


def _intent_id_for(attempt: PaymentAttempt) -> str:
    """The attempt's intent; if its creation was never confirmed, replay the create under its own key."""
    if attempt.provider_intent_id:
        return attempt.provider_intent_id
    try:
        return create_intent_call(attempt).intent_id
    except PaymentDeclined as declined:
        if declined.intent is None:
            raise PermanentEffectError(f"attempt {attempt.pk} was declined and holds no intent")
        return declined.intent.intent_id
    except OutcomeUnknown as unknown:
        raise RetryableEffectError(f"could not learn the intent of attempt {attempt.pk}: {unknown.message}")


def _record_intent(attempt: PaymentAttempt, intent: IntentResult) -> dict:
    outcome, related = services.payment_attempt_record_intent(
        attempt_id=attempt.pk, intent=intent, actor=ACTOR
    )
    return {"intent_id": intent.intent_id, "status": intent.status, **_summary(outcome)}


@effect_handler(EFFECT_CAPTURE_INTENT, max_attempts=8, base_delay_seconds=2)
def capture_intent(item: OutboxItem) -> dict:
    attempt = PaymentAttempt.objects.get(pk=item.aggregate_id)
    provider = get_provider()
    try:
        intent = provider.capture_intent(_intent_id_for(attempt), idempotency_key=_key(item))
    except UnexpectedProviderState as unexpected:
        # Not capturable any more (already captured, or cancelled): record what the provider holds.
        intent = unexpected.intent or provider.retrieve_intent(_intent_id_for(attempt))
    except OutcomeUnknown as unknown:
        outcome = services.payment_attempt_record_unknown(
            attempt_id=attempt.pk, operation="capture", error=unknown.message, actor=ACTOR
        )
        return {"unknown": unknown.message, **_summary(outcome)}
    except PermanentProviderError as refused:
        raise PermanentEffectError(f"capture refused: {refused.code} {refused.message}")
    return _record_intent(attempt, intent)


@effect_handler(EFFECT_CANCEL_INTENT, max_attempts=8, base_delay_seconds=2)
def cancel_intent(item: OutboxItem) -> dict:
    attempt = PaymentAttempt.objects.get(pk=item.aggregate_id)
    provider = get_provider()
    try:
        intent_id = _intent_id_for(attempt)
    except PermanentEffectError:
        return {"result": "nothing to void: the attempt never got an intent"}
    try:
        intent = provider.cancel_intent(
            intent_id,
            idempotency_key=_key(item),
            reason="abandoned" if not attempt.is_current else "requested_by_customer",
        )
    except UnexpectedProviderState as unexpected:
        # The seed's race: a capture reached the provider before our void. Record the capture.
        intent = unexpected.intent or provider.retrieve_intent(intent_id)
    except OutcomeUnknown as unknown:
        outcome = services.payment_attempt_record_unknown(
            attempt_id=attempt.pk, operation="void", error=unknown.message, actor=ACTOR
        )
        return {"unknown": unknown.message, **_summary(outcome)}
    except PermanentProviderError as refused:
        raise PermanentEffectError(f"void refused: {refused.code} {refused.message}")
    return _record_intent(attempt, intent)


@effect_handler(EFFECT_QUERY_ATTEMPT, max_attempts=12, base_delay_seconds=5, max_delay_seconds=900)
def query_attempt(item: OutboxItem) -> dict:
    """Ask the provider what happened. A query is a read (or a keyed replay of the create), safe to repeat."""
    attempt = PaymentAttempt.objects.get(pk=item.aggregate_id)
    if attempt.state != PaymentAttempt.State.UNKNOWN:
        return {"result": f"nothing to resolve: the attempt is {attempt.state}"}
    provider = get_provider()
    try:
        if not attempt.provider_intent_id:
            return _record_create_answer(attempt, lambda: create_intent_call(attempt))
        intent = provider.retrieve_intent(attempt.provider_intent_id)
    except OutcomeUnknown as unknown:
        raise RetryableEffectError(f"provider query failed: {unknown.message}")
    if intent.observation == "requested":
        raise RetryableEffectError(f"the provider is still processing {intent.intent_id} ({intent.status})")
    if intent.observation == "authorized" and attempt.pending_operation in ("capture", "void"):
        outcome = services.payment_attempt_record_not_performed(
            attempt_id=attempt.pk, intent=intent, actor=ACTOR
        )
        return {"intent_id": intent.intent_id, "status": intent.status, **_summary(outcome)}
    return _record_intent(attempt, intent)


# --- refunds ------------------------------------------------------------------------------------
def refund_metadata(refund: Refund) -> dict[str, str]:
    return {
        "ledgerflow_refund": str(refund.public_id),
        "refund_key": refund.refund_key,
        "try": str(refund.tries),
    }


def create_refund_call(refund: Refund) -> RefundResult:
    return get_provider().create_refund(
        intent_id=refund.attempt.provider_intent_id,
        idempotency_key=refund.effect_key(),
        amount=refund.amount,
        metadata=refund_metadata(refund),
    )


def _record_refund_answer(refund: Refund, call) -> dict:
    try:
        result = call()
    except PermanentProviderError as refused:
        outcome, _ = services.refund_record_refusal(
            refund_id=refund.pk, actor=ACTOR, error=f"{refused.code or ''} {refused.message}".strip()
        )
        return {"refused": refused.code, **_summary(outcome)}
    outcome, _ = services.refund_record_result(refund_id=refund.pk, result=result, actor=ACTOR)
    return {"refund_id": result.refund_id, "status": result.status, **_summary(outcome)}


@effect_handler(EFFECT_CREATE_REFUND, max_attempts=8, base_delay_seconds=2)
def create_refund(item: OutboxItem) -> dict:
    refund = Refund.objects.select_related("attempt").get(pk=item.aggregate_id)
    if int(item.payload.get("try", 1)) != refund.tries or refund.state != Refund.State.REQUESTED:
        return {"result": f"superseded: refund is {refund.state} at try {refund.tries}"}
    try:
        return _record_refund_answer(refund, lambda: create_refund_call(refund))
    except OutcomeUnknown as unknown:
        outcome = services.refund_record_unknown(refund_id=refund.pk, error=unknown.message, actor=ACTOR)
        return {"unknown": unknown.message, **_summary(outcome)}


@effect_handler(EFFECT_QUERY_REFUND, max_attempts=12, base_delay_seconds=5, max_delay_seconds=900)
def query_refund(item: OutboxItem) -> dict:
    """Find the refund at the provider by its metadata; if it is not there, send the keyed call again
    (same idempotency key: the provider replays it if it did act, so a second refund is impossible)."""
    refund = Refund.objects.select_related("attempt").get(pk=item.aggregate_id)
    if refund.state != Refund.State.UNKNOWN:
        return {"result": f"nothing to resolve: the refund is {refund.state}"}
    try:
        found = [
            r
            for r in get_provider().list_refunds(intent_id=refund.attempt.provider_intent_id)
            if r.metadata.get("ledgerflow_refund") == str(refund.public_id)
            and r.metadata.get("try", "1") == str(refund.tries)
        ]
        if found:
            return _record_refund_answer(refund, lambda: found[0])
        return _record_refund_answer(refund, lambda: create_refund_call(refund))
    except OutcomeUnknown as unknown:
        raise RetryableEffectError(f"provider query failed: {unknown.message}")

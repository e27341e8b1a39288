"""Writers for payment attempts and refunds. Every state change goes through ``workflow.kernel``.

Public functions (keyword-only):
  payment_attempt_start, payment_attempt_deliver_now, payment_attempt_capture, payment_attempt_void,
  payment_attempt_resolve_review,
  payment_attempt_record_intent, payment_attempt_record_unknown, payment_attempt_record_not_performed,
  payment_attempt_record_refusal, payment_attempt_apply_fact, refund_apply_fact,
  refund_request, refund_record_result, refund_record_unknown, refund_record_refusal, refund_retry,
  refund_resolve_review.
"""

from __future__ import annotations

import re
import uuid

from django.db import transaction
from django.db.models import Max, Sum

from workflow import kernel
from workflow.errors import IdempotencyConflict, NotFound, StateTransitionRejected, ValidationFailed
from workflow.kernel import Outcome, PromisedEffect

from . import hooks
from .facts import Fact, intent_fact, refund_fact
from .models import EFFECT_CREATE_INTENT, EFFECT_CREATE_REFUND, PaymentAttempt, Refund
from .providers import IntentResult, RefundResult

SYSTEM_ACTOR = "system:payments"
LIVE_ATTEMPT_STATES = (
    PaymentAttempt.State.REQUESTED,
    PaymentAttempt.State.AUTHORIZED,
    PaymentAttempt.State.UNKNOWN,
    PaymentAttempt.State.VOID_PENDING,
)
_CURRENCY = re.compile(r"^[a-z]{3}$")


def _attempt(attempt_id: int) -> PaymentAttempt:
    try:
        return PaymentAttempt.objects.get(pk=attempt_id)
    except PaymentAttempt.DoesNotExist:
        raise NotFound(f"payment attempt {attempt_id} not found")


def _refund(refund_id: int) -> Refund:
    try:
        return Refund.objects.select_related("attempt").get(pk=refund_id)
    except Refund.DoesNotExist:
        raise NotFound(f"refund {refund_id} not found")


# --- attempts: commands -------------------------------------------------------------------------
@transaction.atomic
def payment_attempt_start(
    *,
    owner_type: str,
    owner_id: str | int,
    amount: int,
    currency: str,
    actor: str,
    payment_method: str = "",
    reason: str = "",
) -> PaymentAttempt:
    """Create the owner's next attempt and promise its create-and-authorize call to the provider.

    Older live attempts of the same owner are abandoned (no longer current; their authorization is
    voided), so a late capture for them is classified ``stale``.
    """
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        raise ValidationFailed(
            "amount must be a positive integer in minor units", details={"field": "amount"}
        )
    currency = (currency or "").lower()
    if not _CURRENCY.match(currency):
        raise ValidationFailed("currency must be a 3-letter ISO code", details={"field": "currency"})
    owner_id = str(owner_id)
    previous = PaymentAttempt.objects.filter(owner_type=owner_type, owner_id=owner_id)
    sequence = (previous.aggregate(m=Max("sequence"))["m"] or 0) + 1
    for old in previous.filter(is_current=True, state__in=LIVE_ATTEMPT_STATES).order_by("sequence"):
        kernel.apply(
            old,
            "abandon",
            f"superseded-by:{sequence}",
            {"superseded_by_sequence": sequence},
            actor=actor,
            reason=reason or f"superseded by attempt #{sequence}",
        )
    public_id = uuid.uuid4()
    key = f"payatt:{public_id}:create"
    return kernel.create(
        PaymentAttempt,
        actor=actor,
        reason=reason,
        identity=f"start:{owner_type}:{owner_id}:{sequence}",
        payload={"amount": amount, "currency": currency},
        effects=[
            PromisedEffect(
                EFFECT_CREATE_INTENT, key, {"operation": "create", "idempotency_key": key}, None, None
            )
        ],
        public_id=public_id,
        owner_type=owner_type,
        owner_id=owner_id,
        sequence=sequence,
        amount=amount,
        currency=currency,
        payment_method=payment_method,
    )


def payment_attempt_deliver_now(*, attempt_id: int) -> PaymentAttempt:
    """Deliver the attempt's due provider calls in this process instead of waiting for a worker.

    For a caller that wants the provider's answer before it answers its own client (checkout waiting
    for the authorization). Call it after the transaction that promised the work has committed; the
    outbox row lock still guarantees a worker never runs the same call at the same time.
    """
    from workflow import outbox
    from workflow.models import OutboxItem

    due = OutboxItem.objects.filter(aggregate_type=PaymentAttempt.aggregate_label(), aggregate_id=attempt_id,
                                    state__in=outbox.DUE_STATES).order_by("id").values_list("pk", flat=True)
    for item_id in list(due):
        outbox.deliver_one(item_id)
    return _attempt(attempt_id)


def payment_attempt_capture(*, attempt_id: int, actor: str, reason: str = "") -> Outcome:
    """Promise the capture of an authorized attempt (one capture per attempt; repeats are replays)."""
    return kernel.apply(
        (PaymentAttempt, attempt_id), "capture", "command:capture", {}, actor=actor, reason=reason
    )


def payment_attempt_void(*, attempt_id: int, actor: str, reason: str = "") -> Outcome:
    """Promise the void (cancel) of an attempt that is not captured yet."""
    return kernel.apply((PaymentAttempt, attempt_id), "void", "command:void", {}, actor=actor, reason=reason)


def payment_attempt_resolve_review(
    *, attempt_id: int, decision: str, actor: str, reason: str, dry_run: bool = False
) -> Outcome:
    """Operator repair of an attempt in manual_review: authorized | captured | voided | failed."""
    attempt = _attempt(attempt_id)
    return kernel.apply(
        attempt,
        "resolve",
        f"resolve:v{attempt.state_version}",
        {"decision": decision},
        actor=actor,
        reason=reason,
        dry_run=dry_run,
    )


# --- attempts: provider facts -------------------------------------------------------------------
def _publish_fact(*, kind: str, fact: Fact, outcome: Outcome, actor: str, attempt: PaymentAttempt,
                  refund: Refund | None = None) -> list[dict]:
    """Hand a newly classified fact to the subscribers (e.g. the order), inside the same transaction."""
    if outcome.replayed or outcome.result not in ("applied", "needs_review", "stale"):
        return []
    money = refund or attempt
    return hooks.publish(
        hooks.PaymentFact(
            kind=kind,
            fact=fact.event_type,
            identity=fact.identity,
            result=outcome.result,
            state=outcome.state,
            attempt_id=attempt.pk,
            refund_id=refund.pk if refund else None,
            owner_type=attempt.owner_type,
            owner_id=attempt.owner_id,
            is_current_attempt=attempt.is_current,
            amount=fact.payload.get("amount"),
            currency=fact.payload.get("currency", money.currency),
            provider_object_id=fact.payload.get("refund_id" if refund else "intent_id", ""),
            actor=actor,
            payload=fact.payload,
        )
    )


def _publish_attempt(fact: Fact, outcome: Outcome, actor: str) -> list[dict]:
    # outcome.aggregate is the attempt as apply left it: no need to load it again.
    return _publish_fact(kind="attempt", fact=fact, outcome=outcome, actor=actor, attempt=outcome.aggregate)


@transaction.atomic
def payment_attempt_apply_fact(
    *, attempt_id: int, fact: Fact, actor: str, reason: str = "", dry_run: bool = False
) -> tuple[Outcome, list[dict]]:
    outcome = kernel.apply(
        (PaymentAttempt, attempt_id),
        fact.event_type,
        fact.identity,
        fact.payload,
        actor=actor,
        reason=reason,
        dry_run=dry_run,
    )
    related = [] if dry_run else _publish_attempt(fact, outcome, actor)
    return outcome, related


def payment_attempt_record_intent(
    *, attempt_id: int, intent: IntentResult, actor: str = SYSTEM_ACTOR, reason: str = ""
) -> tuple[Outcome | None, list[dict]]:
    """Classify what the provider says about the attempt's intent. None when it has nothing final."""
    fact = intent_fact(intent)
    if fact is None:
        return None, []
    return payment_attempt_apply_fact(attempt_id=attempt_id, fact=fact, actor=actor, reason=reason)


def payment_attempt_record_unknown(
    *, attempt_id: int, operation: str, error: str, actor: str = SYSTEM_ACTOR
) -> Outcome:
    """A call's outcome is unknown: the attempt waits in ``unknown`` for a provider query."""
    attempt = _attempt(attempt_id)
    return kernel.apply(
        attempt,
        "outcome_unknown",
        f"unknown:{operation}:v{attempt.state_version}",
        {"operation": operation, "error": error[:2000]},
        actor=actor,
    )


def payment_attempt_record_not_performed(
    *, attempt_id: int, intent: IntentResult, actor: str = SYSTEM_ACTOR
) -> Outcome:
    """A query found the intent still authorized: the unknown capture/void did not happen."""
    attempt = _attempt(attempt_id)
    fact = intent_fact(intent)
    return kernel.apply(
        attempt,
        "not_performed",
        f"not-performed:{attempt.pending_operation}:v{attempt.state_version}",
        fact.payload,
        actor=actor,
    )


@transaction.atomic
def payment_attempt_record_refusal(
    *, attempt_id: int, identity: str, error: str, decline_code: str = "", actor: str = SYSTEM_ACTOR
) -> tuple[Outcome, list[dict]]:
    """The provider refused the attempt without an intent to show for it (bad request, declined)."""
    fact = Fact(
        "failed",
        identity,
        {"intent_id": "", "status": "refused", "decline_code": decline_code, "error": error[:2000]},
    )
    return payment_attempt_apply_fact(attempt_id=attempt_id, fact=fact, actor=actor)


# --- refunds ------------------------------------------------------------------------------------
@transaction.atomic
def refund_request(
    *, attempt_id: int, refund_key: str, actor: str, amount: int | None = None, reason: str = ""
) -> Refund:
    """Promise a refund of a captured attempt under ``refund_key`` (derive it from the capture).

    The same key again answers the same refund; the same key for another attempt or amount is
    ``E_IDEMPOTENCY_CONFLICT``. The provider call's idempotency key is derived from it.
    """
    if not refund_key or len(refund_key) > 180:
        raise ValidationFailed("refund_key must be 1..180 characters", details={"field": "refund_key"})
    attempt = PaymentAttempt.objects.select_for_update().filter(pk=attempt_id).first()
    if attempt is None:
        raise NotFound(f"payment attempt {attempt_id} not found")
    existing = Refund.objects.filter(refund_key=refund_key).first()
    if existing is not None:
        if existing.attempt_id != attempt.pk or (amount is not None and amount != existing.amount):
            raise IdempotencyConflict(
                f"refund key {refund_key!r} was already used for another refund",
                details={"refund_id": existing.pk},
            )
        return existing
    if attempt.state != PaymentAttempt.State.CAPTURED:
        raise StateTransitionRejected(
            f"attempt {attempt.pk} is {attempt.state}; only a captured attempt is refunded",
            details={"state": attempt.state},
        )
    already = (
        Refund.objects.filter(attempt=attempt)
        .exclude(state=Refund.State.FAILED)
        .aggregate(s=Sum("amount"))["s"]
        or 0
    )
    refundable = (attempt.captured_amount or attempt.amount) - already
    amount = refundable if amount is None else amount
    if not isinstance(amount, int) or amount <= 0 or amount > refundable:
        raise ValidationFailed(f"refund amount must be 1..{refundable}", details={"field": "amount"})
    key = f"refund:{refund_key}"
    return kernel.create(
        Refund,
        actor=actor,
        reason=reason,
        identity=f"request:{refund_key}",
        payload={"amount": amount, "attempt_id": attempt.pk},
        effects=[PromisedEffect(EFFECT_CREATE_REFUND, key, {"try": 1, "idempotency_key": key}, None, None)],
        attempt=attempt,
        refund_key=refund_key,
        amount=amount,
        currency=attempt.currency,
        note=reason[:200],
    )


def _publish_refund(fact: Fact, outcome: Outcome, actor: str) -> list[dict]:
    refund = outcome.aggregate
    return _publish_fact(kind="refund", fact=fact, outcome=outcome, actor=actor, attempt=refund.attempt,
                         refund=refund)


@transaction.atomic
def refund_apply_fact(
    *, refund_id: int, fact: Fact, actor: str, reason: str = "", dry_run: bool = False
) -> tuple[Outcome, list[dict]]:
    outcome = kernel.apply(
        (Refund, refund_id),
        fact.event_type,
        fact.identity,
        fact.payload,
        actor=actor,
        reason=reason,
        dry_run=dry_run,
    )
    related = [] if dry_run else _publish_refund(fact, outcome, actor)
    return outcome, related


def refund_record_result(
    *, refund_id: int, result: RefundResult, actor: str = SYSTEM_ACTOR, reason: str = ""
) -> tuple[Outcome | None, list[dict]]:
    fact = refund_fact(result)
    if fact is None:
        return None, []
    return refund_apply_fact(refund_id=refund_id, fact=fact, actor=actor, reason=reason)


def refund_record_unknown(*, refund_id: int, error: str, actor: str = SYSTEM_ACTOR) -> Outcome:
    refund = _refund(refund_id)
    return kernel.apply(
        refund,
        "outcome_unknown",
        f"unknown:try{refund.tries}:v{refund.state_version}",
        {"error": error[:2000]},
        actor=actor,
    )


def refund_record_refusal(
    *, refund_id: int, error: str, actor: str = SYSTEM_ACTOR
) -> tuple[Outcome, list[dict]]:
    refund = _refund(refund_id)
    fact = Fact(
        "failed", f"refused:try{refund.tries}", {"refund_id": "", "status": "refused", "error": error[:2000]}
    )
    return refund_apply_fact(refund_id=refund_id, fact=fact, actor=actor)


def refund_retry(*, refund_id: int, actor: str, reason: str, dry_run: bool = False) -> Outcome:
    """Operator repair: retry a failed refund under a fresh provider key (needs actor and reason)."""
    refund = _refund(refund_id)
    return kernel.apply(
        refund,
        "retry",
        f"retry:after-try{refund.tries}",
        {"try": refund.tries + 1},
        actor=actor,
        reason=reason,
        dry_run=dry_run,
    )


def refund_resolve_review(
    *, refund_id: int, decision: str, actor: str, reason: str, dry_run: bool = False
) -> Outcome:
    refund = _refund(refund_id)
    return kernel.apply(
        refund,
        "resolve",
        f"resolve:v{refund.state_version}",
        {"decision": decision},
        actor=actor,
        reason=reason,
        dry_run=dry_run,
    )

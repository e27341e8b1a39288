"""``PaymentPort`` backed by the payments app, and the subscriber that turns its facts into order events.

Payments owns the attempt and refund machines and every provider call; orders only asks (start,
void, refund, query) and listens. Attempts are referenced on the order as ``pay-<attempt id>``.
"""

from __future__ import annotations

import logging

from workflow import kernel
from workflow.errors import StateTransitionRejected

from .payment_port import AttemptStarted, AttemptStatus, payment_fact

logger = logging.getLogger(__name__)
OWNER_TYPE = "orders.order"
ACTOR = "system:orders"

ATTEMPT_STATUS = {
    "requested": "pending", "unknown": "pending", "authorized": "authorized", "capture_pending": "authorized",
    "void_pending": "authorized", "captured": "captured", "voided": "voided", "failed": "failed",
    "manual_review": "pending",
}


def attempt_ref_for(attempt_id: int) -> str:
    return f"pay-{attempt_id}"


def attempt_id_from(attempt_ref: str) -> int:
    """The payments attempt id behind ``pay-<id>`` (-1 for a reference payments never issued, e.g. demo data)."""
    ref = str(attempt_ref).removeprefix("pay-")
    return int(ref) if ref.isdigit() else -1


class PaymentsAppPort:
    def start_attempt(self, *, order_id: int, amount: int, currency: str, idempotency_key: str) -> AttemptStarted:
        from payments import services

        attempt = services.payment_attempt_start(owner_type=OWNER_TYPE, owner_id=order_id, amount=amount,
                                                 currency=currency, actor=ACTOR, reason=idempotency_key[:200])
        return AttemptStarted(attempt_ref=attempt_ref_for(attempt.pk), attempt_id=attempt.pk,
                              provider_ref=attempt.provider_intent_id, status=attempt.state)

    def request_void(self, *, order_id: int, attempt_ref: str, idempotency_key: str) -> str:
        from payments import services
        from payments.models import PaymentAttempt

        attempt = PaymentAttempt.objects.filter(pk=attempt_id_from(attempt_ref)).first()
        if attempt is None:
            return "no_attempt"  # its creation was rolled back with the step that failed
        known = {"captured": "already_captured", "failed": "already_failed", "voided": "voided"}
        if attempt.state in known:
            return known[attempt.state]
        outcome = services.payment_attempt_void(attempt_id=attempt.pk, actor=ACTOR, reason=f"order {order_id}")
        # void_pending/capture_pending: the provider's answer arrives later as a fact
        return "requested" if outcome.accepted else f"in_flight:{outcome.state}"

    def request_refund(self, *, order_id: int, attempt_ref: str, capture_ref: str, amount: int, currency: str,
                       idempotency_key: str) -> dict:
        from payments import services

        refund = services.refund_request(attempt_id=attempt_id_from(attempt_ref), refund_key=idempotency_key,
                                         amount=amount, actor=ACTOR, reason=f"order {order_id} cancelled")
        # The refund's confirmation reaches the order through the hook (order_on_payment_fact).
        return {"status": "requested", "refund_id": refund.pk, "refund_state": refund.state}

    def attempt_status(self, *, attempt_ref: str) -> AttemptStatus:
        """Ask the provider (through payments' adapter) and record what it says on the attempt, so the
        fact reaches the order by the same road as a webhook would."""
        from payments import services
        from payments.models import PaymentAttempt
        from payments.providers import get_provider

        attempt = PaymentAttempt.objects.filter(pk=attempt_id_from(attempt_ref)).first()
        if attempt is None:
            return AttemptStatus(status="failed")  # payments holds no such attempt: nothing was ever taken
        if attempt.provider_intent_id:
            intent = get_provider().retrieve_intent(attempt.provider_intent_id)
            services.payment_attempt_record_intent(attempt_id=attempt.pk, intent=intent, actor=ACTOR,
                                                   reason="orders asked the provider")
            status = intent.observation if intent.observation != "requested" else "pending"
            return AttemptStatus(status=status, amount=intent.amount_received or intent.amount,
                                 currency=intent.currency, capture_ref=intent.intent_id if status == "captured" else "")
        return AttemptStatus(status=ATTEMPT_STATUS.get(attempt.state, "pending"), amount=attempt.amount,
                             currency=attempt.currency)

    def retry_refund(self, *, order_id: int, refund_key: str, actor: str, reason: str,
                     dry_run: bool = False) -> kernel.Outcome:
        from payments import services
        from payments.models import Refund
        from workflow.models import OutboxItem
        from workflow.outbox import outbox_requeue

        refund = Refund.objects.filter(refund_key=refund_key).first()
        if refund is None:  # the order promised the refund but payments never recorded one: nothing failed yet
            raise StateTransitionRejected(f"payments has no refund {refund_key}: there is no failed refund to retry",
                                          details={"refund_key": refund_key})
        dead = (OutboxItem.objects.filter(aggregate_type=Refund.aggregate_label(), aggregate_id=refund.pk,
                                          state=OutboxItem.State.DEAD).order_by("-id").first())
        if dead is not None:
            # The provider call's retries ran out with its outcome unknown (the refund may have happened):
            # requeue that call under its SAME key instead of refunding under a new one.
            return outbox_requeue(item_id=dead.pk, actor=actor, reason=reason, dry_run=dry_run)
        return services.refund_retry(refund_id=refund.pk, actor=actor, reason=reason, dry_run=dry_run)

    def describe(self, *, attempt_ref: str) -> dict:
        from payments.models import PaymentAttempt

        attempt = PaymentAttempt.objects.filter(pk=attempt_id_from(attempt_ref)).first()
        if attempt is None:
            return {}
        return {"state": attempt.state, "provider_ref": attempt.provider_intent_id, "is_current": attempt.is_current}


def order_on_payment_fact(fact) -> kernel.Outcome | None:
    """payments.hooks subscriber: a fact newly classified on an attempt or refund owned by an order."""
    from payments import services
    from payments.models import Refund

    from .models import Order

    order = Order.objects.filter(pk=int(fact.owner_id)).first()
    if order is None:
        logger.warning("payment fact for unknown order %s", fact.owner_id)
        return None
    attempt_ref = attempt_ref_for(fact.attempt_id)
    identity = f"payment:{fact.identity}"
    if fact.kind == "attempt":
        if fact.fact == "authorized":
            # Capture on authorization (the shop's policy), only for the order's current attempt while it
            # still wants the money; a cancelling order has a void promised instead.
            if order.state == Order.State.PAYMENT_PENDING and order.current_attempt_id == fact.attempt_id:
                services.payment_attempt_capture(attempt_id=fact.attempt_id, actor=ACTOR,
                                                 reason=f"order {order.pk} captures on authorization")
            return None
        if fact.fact in ("captured", "voided", "failed"):
            return payment_fact(order_id=order.pk, fact=fact.fact, attempt_ref=attempt_ref, amount=fact.amount,
                                currency=fact.currency, capture_ref=fact.provider_object_id, identity=identity,
                                actor=fact.actor)
        return None
    if fact.kind == "refund" and fact.fact in ("succeeded", "failed"):
        refund = Refund.objects.get(pk=fact.refund_id)
        if fact.fact == "succeeded":
            return payment_fact(order_id=order.pk, fact="refund_succeeded", refund_key=refund.refund_key,
                                amount=fact.amount, refund_ref=fact.provider_object_id, identity=identity,
                                actor=fact.actor)
        return payment_fact(order_id=order.pk, fact="refund_failed", refund_key=refund.refund_key,
                            error=refund.failure_reason or "refund failed", identity=identity, actor=fact.actor)
    return None

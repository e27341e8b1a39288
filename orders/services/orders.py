"""Commands on orders from integrators and operators. Each one is a call to ``apply``."""

from __future__ import annotations

from django.db import transaction

from workflow import kernel
from workflow.errors import NotFound, StateTransitionRejected, ValidationFailed
from workflow.models import OutboxItem

from ..models import Order
from ..payment_port import get_port

WAREHOUSE_EVENTS = ("fulfillment_accepted", "shipped", "delivery_confirmed")


def _order(order_id: int) -> Order:
    order = Order.objects.filter(pk=order_id).first()
    if order is None:
        raise NotFound(f"order {order_id} not found")
    return order


def order_cancel(*, order_id: int, actor: str, reason: str = "", dry_run: bool = False) -> kernel.Outcome:
    """Request cancellation. One cancellation request per order: its identity is fixed, so repeats are
    ``already_applied`` (the reason is recorded with the first)."""
    _order(order_id)
    return kernel.apply((Order, order_id), "cancel", "cancel-request", {}, actor=actor,
                        reason=reason or "cancellation requested", dry_run=dry_run)


def order_start_payment_attempt(*, order_id: int, idempotency_key: str, actor: str) -> kernel.Outcome:
    """A new attempt after a failed one. The order must be ``payment_failed``: checked before the
    provider is called (dry run), then the started attempt is applied."""
    order = _order(order_id)
    number = order.attempt_count + 1
    probe = {"attempt_ref": "probe", "amount": order.total_amount, "currency": order.currency}
    preview = kernel.apply(order, "payment_started", f"attempt-probe:{number}", probe, actor=actor, dry_run=True)
    if preview.result != "applied":
        raise StateTransitionRejected(f"order {order_id} is {order.state}: a new payment attempt is not allowed",
                                      details={"outcome": preview.as_dict()})
    with transaction.atomic():  # with the payments app: the attempt and the order's pointer commit together
        attempt = get_port().start_attempt(order_id=order.pk, amount=order.total_amount, currency=order.currency,
                                           idempotency_key=f"order:{order.pk}:attempt-{number}:{idempotency_key}")
        return _apply_started(order, attempt, actor)


def _apply_started(order: Order, attempt, actor: str) -> kernel.Outcome:
    return kernel.apply(order, "payment_started", f"attempt:{attempt.attempt_ref}:started",
                        {"attempt_ref": attempt.attempt_ref, "attempt_id": attempt.attempt_id,
                         "provider_ref": attempt.provider_ref, "amount": order.total_amount,
                         "currency": order.currency}, actor=actor)


def order_apply_warehouse_event(*, order_id: int, event_type: str, identity: str, payload: dict, actor: str,
                                dry_run: bool = False) -> kernel.Outcome:
    if event_type not in WAREHOUSE_EVENTS:
        raise ValidationFailed(f"event type must be one of {', '.join(WAREHOUSE_EVENTS)}",
                               details={"field": "type"})
    _order(order_id)
    return kernel.apply((Order, order_id), event_type, identity, payload, actor=actor, dry_run=dry_run)


def order_resolve_review(*, order_id: int, decision: str, actor: str, reason: str,
                         dry_run: bool = False) -> kernel.Outcome:
    """Operator repair of a manual_review order: ``refund``, ``accept`` or ``cancel`` (actor + reason)."""
    order = _order(order_id)
    return kernel.apply(order, "resolve", f"resolve:v{order.state_version}", {"decision": decision},
                        actor=actor, reason=reason, dry_run=dry_run)


def order_retry_refund(*, order_id: int, actor: str, reason: str, dry_run: bool = False) -> kernel.Outcome:
    """Operator retry of a refund that did not complete. Needs an actor and a reason.

    * The order's refund promise is dead (automatic delivery retries exhausted, outcome unknown):
      requeue it with the SAME key, so a refund that did happen at the provider is not repeated.
    * Otherwise the refund itself failed: ask the payment side to try again (a failed refund moved
      no money); its success reaches the order as ``refund_succeeded``.
    """
    from workflow.outbox import outbox_requeue

    order = _order(order_id)
    if order.state != Order.State.REFUND_PENDING or not order.refund_key:
        raise StateTransitionRejected(f"order {order_id} is {order.state}: there is no refund to retry")
    if not actor or actor == "system" or not (reason or "").strip():
        raise ValidationFailed("retrying a refund is a repair: it needs an actor and a reason",
                               details={"field": "reason"})
    item = OutboxItem.objects.filter(effect_key=order.refund_key).first()
    if item is not None and item.state == OutboxItem.State.DEAD:
        return outbox_requeue(item_id=item.pk, actor=actor, reason=reason, dry_run=dry_run)
    if item is not None and item.state != OutboxItem.State.DELIVERED:
        raise StateTransitionRejected(f"the refund {order.refund_key} is still being delivered ({item.state})")
    return get_port().retry_refund(order_id=order.pk, refund_key=order.refund_key, actor=actor, reason=reason,
                                   dry_run=dry_run)

"""Reads: order views for the API and console, stuck orders, the invariant audit."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from workflow import clock, kernel
from workflow.models import STATE_CHANGING_RESULTS, OutboxItem, Timer, Transition
from workflow.selectors import history_mismatches

from .models import Cart, Order, Product, Reservation


def product_get(*, sku: str) -> Product | None:
    return Product.objects.filter(sku=sku).first()


def order_get(*, order_id: int) -> Order | None:
    return Order.objects.filter(pk=order_id).first()


def order_owed_work(order: Order) -> list[OutboxItem]:
    """Outbox promises of this order not yet delivered (pending, retry scheduled, or dead)."""
    return list(OutboxItem.objects.filter(aggregate_type=Order.aggregate_label(), aggregate_id=order.pk)
                .exclude(state=OutboxItem.State.DELIVERED).order_by("id"))


def order_pending_timers(order: Order) -> list[Timer]:
    """Timers that still govern: armed in the current state since it was entered (older ones will fire stale)."""
    return list(Timer.objects.filter(aggregate_type=Order.aggregate_label(), aggregate_id=order.pk,
                                     status=Timer.Status.SCHEDULED, armed_state=order.state,
                                     armed_at__gte=order.entered_state_at).order_by("scheduled_at"))


def order_reservations(order: Order) -> list[Reservation]:
    return list(Reservation.objects.filter(order_id=order.pk).select_related("product").order_by("id"))


def order_history(order: Order) -> list[Transition]:
    return list(kernel.timeline(order))


# --- stuck orders --------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class StuckOrder:
    order: Order
    waited_seconds: int
    expected_seconds: int
    owner: str


def stuck_orders(*, slack_seconds: int = 60, now=None) -> list[StuckOrder]:
    """Non-terminal orders that have waited longer than their state's policy allows (plus slack)."""
    now = now or clock.now()
    out: list[StuckOrder] = []
    for state, policy in Order.WAIT_POLICIES.items():
        expected = policy.overdue_after_seconds
        if expected is None:
            continue
        cutoff = now - timedelta(seconds=expected + slack_seconds)
        for order in Order.objects.filter(state=state, entered_state_at__lt=cutoff).order_by("entered_state_at"):
            out.append(StuckOrder(order, int((now - order.entered_state_at).total_seconds()), expected, policy.owner))
    return sorted(out, key=lambda s: s.order.entered_state_at)


def stuck_checkout_carts(*, grace_seconds: int, now=None) -> list[Cart]:
    now = now or clock.now()
    return list(Cart.objects.filter(state=Cart.State.CHECKING_OUT,
                                    entered_state_at__lt=now - timedelta(seconds=grace_seconds)).order_by("id"))


# --- invariant audit -----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Violation:
    invariant: str
    aggregate_type: str
    aggregate_id: int
    detail: str


def _paid_without_capture() -> list[Violation]:
    """Paid (or further) ⇒ the order holds a capture, and the payments attempt it names is captured."""
    from payments.models import PaymentAttempt

    label = Order.aggregate_label()
    paid = Order.objects.filter(state__in=Order.CAPTURED_STATES)
    out = [Violation("paid_implies_capture", label, pk, f"order is {state} with no capture recorded")
           for pk, state in paid.filter(capture_ref="").values_list("pk", "state")]
    with_attempt = paid.exclude(capture_ref="").filter(current_attempt_id__isnull=False)
    attempts = dict(PaymentAttempt.objects.filter(owner_type=label, pk__in=with_attempt.values("current_attempt_id"))
                    .values_list("pk", "state"))
    for pk, state, attempt_id in with_attempt.values_list("pk", "state", "current_attempt_id"):
        if attempt_id in attempts and attempts[attempt_id] != PaymentAttempt.State.CAPTURED:
            out.append(Violation("paid_implies_capture", label, pk,
                                 f"order is {state} but payment attempt {attempt_id} is {attempts[attempt_id]}"))
    return out


def _cancelled_with_live_reservation() -> list[Violation]:
    """A cancelled order may have a live hold only while its release is still a pending promise."""
    out = []
    promised = set(OutboxItem.objects.filter(effect_type="orders.release_inventory",
                                             state__in=[OutboxItem.State.PENDING, OutboxItem.State.RETRY_SCHEDULED])
                   .values_list("aggregate_id", flat=True))
    live = (Reservation.objects.filter(state__in=Reservation.LIVE_STATES,
                                       order_id__in=Order.objects.filter(state=Order.State.CANCELLED).values("pk"))
            .values_list("order_id", "pk", "state"))
    for order_id, reservation_id, state in live:
        if order_id not in promised:
            out.append(Violation("cancelled_implies_no_live_reservation", Order.aggregate_label(), order_id,
                                 f"reservation {reservation_id} is still {state} and no release is pending"))
    return out


def _delivered_left() -> list[Violation]:
    rows = (Transition.objects.filter(aggregate_type=Order.aggregate_label(), from_state=Order.State.DELIVERED,
                                      result__in=STATE_CHANGING_RESULTS)
            .exclude(to_state=Order.State.DELIVERED).values_list("aggregate_id", "to_state", "id"))
    return [Violation("delivered_never_reenters_active", Order.aggregate_label(), agg_id,
                      f"transition {tid} moved a delivered order to {to_state}") for agg_id, to_state, tid in rows]


def _stock_negative() -> list[Violation]:
    rows = Product.objects.filter(stock_on_hand__lt=0).values_list("pk", "stock_on_hand")
    return [Violation("stock_never_negative", "orders.product", pk, f"stock is {stock}") for pk, stock in rows]


def invariant_violations() -> list[Violation]:
    """Every audited invariant; an empty list means the data is consistent."""
    out = _paid_without_capture() + _cancelled_with_live_reservation() + _delivered_left() + _stock_negative()
    for model in (Order, Cart, Reservation):
        for m in history_mismatches(model):
            out.append(Violation("history_replay_equals_row", m.aggregate_type, m.aggregate_id,
                                 f"{m.problem}: row {m.row_state}/v{m.row_version}, "
                                 f"history {m.replayed_state}/v{m.replayed_version}"))
    return out

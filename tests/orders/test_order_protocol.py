"""The seed's "Put the model under pressure" list, each as its own test, plus order 1842's trace.

Given/when/then against real PostgreSQL. The provider is the in-process double
(orders.payment_port.SimulatedPaymentPort): it is the outside world, and it honours idempotency keys.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection

from orders.models import Order, Product, Reservation
from orders.payment_port import payment_fact
from orders.services import order_cancel, order_retry_refund, order_start_payment_attempt
from orders.services.reservations import reservations_hold
from tests.orders.conftest import capture, drain
from workflow import clock, kernel, outbox, timers
from workflow.errors import ValidationFailed
from workflow.models import OutboxItem, Timer, Transition
from workflow.selectors import history_mismatches

pytestmark = pytest.mark.django_db


def stock(product) -> int:
    return Product.objects.get(pk=product.pk).stock_on_hand


# --- cancellation and capture arrive in both orders ------------------------------------------------
def test_cancel_then_capture_refunds_and_cancels(place_order, product, port):
    order = place_order(2)
    assert stock(product) == 18

    cancelled = order_cancel(order_id=order.pk, actor="buyer")
    port.capture(order.current_attempt_ref)  # the provider captured before it saw the void
    captured = capture(order)
    drain()

    assert (cancelled.state, captured.state) == ("cancellation_pending", "refund_pending")
    order.refresh_from_db()
    assert order.state == "cancelled"
    assert port.refund_calls == 1 and port.void_calls == 0
    void = OutboxItem.objects.get(effect_key=f"void:{order.current_attempt_ref}")
    assert void.state == "delivered" and void.result["answer"] == "already_captured"
    assert stock(product) == 20
    assert not Reservation.objects.filter(order_id=order.pk, state__in=Reservation.LIVE_STATES).exists()


def test_capture_then_cancel_refunds_and_cancels(place_order, product, port):
    order = place_order(2)
    port.capture(order.current_attempt_ref)

    captured = capture(order)
    drain()  # commit inventory, warehouse handoff
    cancelled = order_cancel(order_id=order.pk, actor="buyer")
    drain()

    assert (captured.state, cancelled.state) == ("paid", "refund_pending")
    order.refresh_from_db()
    assert order.state == "cancelled"
    assert port.refund_calls == 1
    assert stock(product) == 20
    assert set(Reservation.objects.filter(order_id=order.pk).values_list("state", flat=True)) == {"released"}


def test_cancel_then_void_confirmed_cancels_without_refund(place_order, product, port):
    order = place_order(1)

    order_cancel(order_id=order.pk, actor="buyer")
    drain()

    order.refresh_from_db()
    assert order.state == "cancelled" and port.void_calls == 1 and port.refund_calls == 0
    assert stock(product) == 20


# --- the same capture event arrives twice ------------------------------------------------------------
def test_same_capture_twice_is_applied_once(place_order, port):
    order = place_order(1)
    first = capture(order, identity="evt-91")
    before = (Transition.objects.count(), OutboxItem.objects.count())

    second = capture(order, identity="evt-91")

    assert first.result == "applied" and first.state == "paid"
    assert second.result == "already_applied" and second.replayed
    assert second.transition_id == first.transition_id
    assert (Transition.objects.count(), OutboxItem.objects.count()) == before


# --- an old attempt reports success after a new attempt begins ----------------------------------------
def test_old_attempt_capture_after_new_attempt_is_stale(place_order, port):
    order = place_order(1)
    old_ref = order.current_attempt_ref
    payment_fact(order_id=order.pk, fact="failed", attempt_ref=old_ref)
    started = order_start_payment_attempt(order_id=order.pk, idempotency_key="retry-1", actor="buyer")
    order.refresh_from_db()
    assert started.state == "payment_pending" and order.current_attempt_ref != old_ref

    late = capture(order, attempt_ref=old_ref)

    assert late.result == "stale"
    order.refresh_from_db()
    assert order.state == "payment_pending" and order.capture_ref == ""
    row = Transition.objects.get(pk=late.transition_id)
    assert row.payload["attempt_ref"] == old_ref  # enough detail kept to reconcile it with the provider
    assert capture(order).state == "paid"


# --- a refund succeeds remotely and the worker crashes before recording delivery --------------------
def test_refund_done_remotely_then_worker_crash_refunds_once(place_order, product, port):
    order = place_order(1)
    port.capture(order.current_attempt_ref)
    capture(order)
    drain()
    order_cancel(order_id=order.pk, actor="buyer")
    port.crash_after_refund = True

    drain()  # the provider refunds, then the worker loses the answer
    item = OutboxItem.objects.get(effect_type="orders.request_refund")
    order.refresh_from_db()
    assert (item.state, order.state, port.refund_calls) == ("retry_scheduled", "refund_pending", 1)

    with clock.travel(3600):
        drain()  # redelivery: same effect key → the provider answers with the same refund

    item.refresh_from_db()
    order.refresh_from_db()
    assert (item.state, order.state, port.refund_calls, len(port.refunds)) == ("delivered", "cancelled", 1, 1)


# --- a stale cancellation timer fires after the order is refunded --------------------------------------
def test_cancellation_timer_after_refund_is_stale(place_order, port):
    order = place_order(1)
    order_cancel(order_id=order.pk, actor="buyer")
    port.capture(order.current_attempt_ref)
    capture(order)
    drain()
    order.refresh_from_db()
    assert order.state == "cancelled"
    version = order.state_version

    with clock.travel(10 * 60):
        fired = timers.fire_due()

    by_type = {t.timer_type: t.result for t in fired}
    assert by_type["cancellation_timed_out"] == "stale"
    order.refresh_from_db()
    assert (order.state, order.state_version) == ("cancelled", version)


# --- an operator retries an exhausted refund with an actor and a reason --------------------------------
def test_operator_retries_exhausted_refund(place_order, product, port, monkeypatch):
    order = place_order(1)
    port.capture(order.current_attempt_ref)
    capture(order)
    drain()
    order_cancel(order_id=order.pk, actor="buyer")

    def provider_down(**kwargs):
        raise ConnectionError("provider unreachable")

    real_refund = port.request_refund
    monkeypatch.setattr(port, "request_refund", provider_down)
    hours = 0
    while OutboxItem.objects.get(effect_type="orders.request_refund").state != "dead":
        hours += 1
        with clock.travel(hours * 3600):
            outbox.deliver_one()
    item = OutboxItem.objects.get(effect_type="orders.request_refund")
    assert item.attempts == item.max_attempts

    with pytest.raises(ValidationFailed):
        order_retry_refund(order_id=order.pk, actor="operator:ana", reason="  ")
    monkeypatch.setattr(port, "request_refund", real_refund)
    outcome = order_retry_refund(order_id=order.pk, actor="operator:ana", reason="provider outage over (INC-42)")
    drain()

    assert outcome.result == "applied"
    row = Transition.objects.get(pk=outcome.transition_id)
    assert (row.event_type, row.actor, row.reason) == ("requeue", "operator:ana", "provider outage over (INC-42)")
    order.refresh_from_db()
    item.refresh_from_db()
    assert (order.state, item.state, port.refund_calls) == ("cancelled", "delivered", 1)
    assert order.refund_key == item.effect_key == f"refund:{order.capture_ref}"


# --- two commands observe the same version and only one transition commits ----------------------------
@pytest.mark.django_db(transaction=True)
def test_two_commands_on_same_version_only_one_commits(place_order, port):
    order = place_order(1)
    capture(order)
    order.refresh_from_db()
    observed = order.state_version
    barrier = threading.Barrier(2)
    outcomes = {}

    def accept(name):
        try:
            barrier.wait()
            outcomes[name] = kernel.apply((Order, order.pk), "fulfillment_accepted", f"wh-{name}", {},
                                          actor=f"warehouse:{name}")
        finally:
            connection.close()

    threads = [threading.Thread(target=accept, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    results = sorted(o.result for o in outcomes.values())
    assert results == ["applied", "illegal"]
    order.refresh_from_db()
    assert (order.state, order.state_version) == ("fulfillment_pending", observed + 1)
    committed = Transition.objects.filter(aggregate_type="orders.order", aggregate_id=order.pk,
                                          from_version=observed, result="applied")
    assert committed.count() == 1


# --- order 1842 ------------------------------------------------------------------------------------
def test_order_1842_trace(product, port):
    """Reserved, pay-7 starts (v2); cancel (v3 cancellation_pending, void promised); evt-91 captures
    pay-7 → refund_pending, refund keyed by the capture; evt-91 again → already applied; the refund
    confirms → cancelled, inventory release promised; pay-6's capture → stale."""
    kernel.create(Order, actor="checkout", id=1842, state="inventory_reserved", currency="usd",
                  total_amount=5000, checkout_key="trace-1842",
                  lines=[{"sku": product.sku, "quantity": 2, "unit_price": 2500, "line_total": 5000}])
    reservation = reservations_hold(lines=[{"product_id": product.pk, "sku": product.sku, "quantity": 2}],
                                    cart_id=None, checkout_key="trace-1842", actor="checkout")[0]
    Reservation.objects.filter(pk=reservation.pk).update(order_id=1842)
    port.attempts["pay-7"] = {"status": "authorized", "amount": 5000, "currency": "usd", "order_id": 1842}
    started = kernel.apply((Order, 1842), "payment_started", "attempt:pay-7:started",
                           {"attempt_ref": "pay-7", "amount": 5000, "currency": "usd", "provider_ref": "pi_7"})
    assert (started.state, started.version) == ("payment_pending", 2)

    # 10:00:04 the buyer cancels
    cancel = order_cancel(order_id=1842, actor="buyer:1842", reason="changed my mind")
    assert (cancel.result, cancel.state, cancel.version) == ("applied", "cancellation_pending", 3)
    void = OutboxItem.objects.get(effect_key="void:pay-7")
    assert void.state == "pending" and Transition.objects.get(pk=cancel.transition_id).to_version == 3

    # 10:00:05 evt-91: the provider captured pay-7 at 10:00:03
    port.capture("pay-7")
    evt91 = payment_fact(order_id=1842, fact="captured", attempt_ref="pay-7", amount=5000, currency="usd",
                         capture_ref="ch_pay-7", identity="evt-91")
    assert (evt91.result, evt91.state, evt91.version) == ("applied", "refund_pending", 4)
    refund = OutboxItem.objects.get(effect_type="orders.request_refund", aggregate_id=1842)
    assert refund.effect_key == "refund:ch_pay-7"

    # evt-91 again: the same provider fact repeated
    again = payment_fact(order_id=1842, fact="captured", attempt_ref="pay-7", amount=5000, currency="usd",
                         capture_ref="ch_pay-7", identity="evt-91")
    assert (again.result, again.replayed, again.transition_id) == ("already_applied", True, evt91.transition_id)

    # the void worker (already in flight) tolerates "already captured"; the refund worker refunds once
    drain()
    order = Order.objects.get(pk=1842)
    assert (order.state, order.state_version) == ("cancelled", 5)
    assert OutboxItem.objects.get(pk=void.pk).result["answer"] == "already_captured"
    assert port.refund_calls == 1 and port.void_calls == 0
    assert Reservation.objects.get(pk=reservation.pk).state == "released"
    assert stock(product) == 20

    # pay-6, an abandoned attempt, reports a capture
    pay6 = payment_fact(order_id=1842, fact="captured", attempt_ref="pay-6", amount=5000, currency="usd",
                        capture_ref="ch_pay-6", identity="evt-95")
    assert (pay6.result, pay6.state, pay6.version) == ("stale", "cancelled", 5)
    assert Transition.objects.get(pk=pay6.transition_id).payload["capture_ref"] == "ch_pay-6"

    path = list(Transition.objects.filter(aggregate_type="orders.order", aggregate_id=1842,
                                          result__in=["applied", "needs_review"]).order_by("to_version")
                .values_list("to_state", "to_version"))
    assert path == [("inventory_reserved", 1), ("payment_pending", 2), ("cancellation_pending", 3),
                    ("refund_pending", 4), ("cancelled", 5)]
    assert history_mismatches(Order) == []


# --- the 15-minute inventory hold in refund_pending ------------------------------------------------
def test_inventory_released_after_15_minutes_while_refund_unresolved(place_order, product, port):
    order = place_order(3)
    port.capture(order.current_attempt_ref)
    capture(order)
    drain()
    port.refund_outcome = "pending"  # the provider accepts the refund but does not settle it
    order_cancel(order_id=order.pk, actor="buyer")
    drain()
    order.refresh_from_db()
    assert order.state == "refund_pending" and stock(product) == 17

    with clock.travel(14 * 60):
        early = [t.timer_type for t in timers.fire_due()]
        drain()
    assert "inventory_hold_elapsed" not in early and stock(product) == 17

    with clock.travel(15 * 60 + 1):
        fired = {t.timer_type: t.result for t in timers.fire_due()}
        drain()

    assert fired["inventory_hold_elapsed"] == "applied"
    order.refresh_from_db()
    assert order.state == "refund_pending" and order.inventory_release_promised_at is not None
    assert stock(product) == 20
    hold = Transition.objects.get(aggregate_type="orders.order", aggregate_id=order.pk,
                                  event_type="inventory_hold_elapsed")
    assert hold.actor == "system:timer" and hold.event_identity.startswith("timer:inventory_hold_elapsed:")

    # the refund settles later: cancelled, and the release promise is the same one (not doubled)
    done = payment_fact(order_id=order.pk, fact="refund_succeeded", refund_key=order.refund_key,
                        amount=order.captured_amount, refund_ref="re_1")
    assert done.state == "cancelled"
    assert OutboxItem.objects.filter(effect_type="orders.release_inventory", aggregate_id=order.pk).count() == 1
    assert stock(product) == 20


def test_inventory_hold_timer_is_stale_when_refund_settled_first(place_order, product, port):
    order = place_order(1)
    port.capture(order.current_attempt_ref)
    capture(order)
    drain()
    order_cancel(order_id=order.pk, actor="buyer")
    drain()  # refund succeeds at once → cancelled → released

    with clock.travel(16 * 60):
        fired = {t.timer_type: t.result for t in timers.fire_due()}

    assert fired["inventory_hold_elapsed"] == "stale"
    assert stock(product) == 20


# --- other timers ------------------------------------------------------------------------------------
def test_reservation_expiry_returns_stock(product):
    reservation = reservations_hold(lines=[{"product_id": product.pk, "sku": product.sku, "quantity": 4}],
                                    cart_id=None, checkout_key="abandoned", actor="test")[0]
    assert stock(product) == 16

    with clock.travel(46 * 60):
        fired = timers.fire_due()

    assert [(t.timer_type, t.result) for t in fired] == [("expire", "applied")]
    assert Reservation.objects.get(pk=reservation.pk).state == "expired"
    assert stock(product) == 20


def test_payment_timeout_cancels_and_voids(place_order, product, port):
    order = place_order(1)

    with clock.travel(31 * 60):
        fired = {t.timer_type: t.result for t in timers.fire_due()}
        drain()

    assert fired["payment_timed_out"] == "applied"
    order.refresh_from_db()
    assert order.state == "cancelled" and port.void_calls == 1 and stock(product) == 20


def test_cancellation_timeout_asks_provider_then_decides(place_order, product, port):
    order = place_order(1)
    order_cancel(order_id=order.pk, actor="buyer")
    # the void promise is never delivered (workers down); meanwhile the provider captured
    OutboxItem.objects.filter(effect_type="orders.request_void").update(next_attempt_at=clock.now() + timedelta(days=1))
    port.capture(order.current_attempt_ref)

    with clock.travel(121):
        fired = {t.timer_type: t.result for t in timers.fire_due()}
        query = OutboxItem.objects.get(effect_type="orders.resolve_cancellation")
        outbox.deliver_one(query.pk)

    assert fired["cancellation_timed_out"] == "applied"
    order.refresh_from_db()
    assert order.state == "refund_pending" and order.capture_ref == f"ch_{order.current_attempt_ref}"
    assert Timer.objects.filter(aggregate_id=order.pk, timer_type="cancellation_timed_out",
                                status="scheduled").exists()  # the next check stays armed (it will be stale)


def test_cancellation_timeout_with_attempt_still_authorized_voids(place_order, port):
    order = place_order(1)
    order_cancel(order_id=order.pk, actor="buyer")
    OutboxItem.objects.filter(effect_type="orders.request_void").update(next_attempt_at=clock.now() + timedelta(days=1))

    with clock.travel(121):
        timers.fire_due()
        outbox.deliver_one(OutboxItem.objects.get(effect_type="orders.resolve_cancellation").pk)

    order.refresh_from_db()
    assert order.state == "cancelled" and port.void_calls == 1


def test_refund_service_target_flags_operators(place_order, port):
    order = place_order(1)
    port.capture(order.current_attempt_ref)
    capture(order)
    drain()
    port.refund_outcome = "pending"
    order_cancel(order_id=order.pk, actor="buyer")
    drain()

    with clock.travel(24 * 3600 + 1):
        fired = {t.timer_type: t.result for t in timers.fire_due()}

    assert fired["refund_overdue"] == "applied"
    order.refresh_from_db()
    assert order.state == "refund_pending" and "service target" in order.attention


def test_capture_during_cancellation_under_review_policy(settings, place_order, port):
    settings.ORDERS_CAPTURE_DURING_CANCELLATION = "manual_review"
    order = place_order(1)
    order_cancel(order_id=order.pk, actor="buyer")

    outcome = capture(order)

    assert (outcome.result, outcome.state) == ("needs_review", "manual_review")
    assert not OutboxItem.objects.filter(effect_type="orders.request_refund").exists()
    resolved = kernel.apply((Order, order.pk), "resolve", "resolve-1", {"decision": "refund"},
                            actor="operator:ana", reason="buyer confirmed cancellation")
    assert resolved.state == "refund_pending"
    drain()
    order.refresh_from_db()
    assert order.state == "cancelled"

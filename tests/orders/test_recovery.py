"""Stuck checkouts (process death between saga steps), the invariant audit, the stuck-orders selector."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from orders.models import Cart, Order, Product, Reservation
from orders.selectors import invariant_violations, stuck_orders
from orders.services import cart_add_item, cart_create, checkout_place, default_steps
from orders.services.recovery import checkout_reconcile, checkouts_reconcile_stuck
from orders.tasks import audit_invariants, reconcile_stuck_checkouts
from tests.orders.conftest import drain
from workflow import clock, kernel
from workflow.models import Transition

pytestmark = pytest.mark.django_db


def died_after(step: str, product, quantity=2) -> Cart:
    """Run checkout up to and including ``step``, then stop as if the process had died."""
    cart = cart_create(actor="test")
    cart_add_item(cart_id=cart.pk, sku=product.sku, quantity=quantity, actor="test")
    steps = default_steps()
    names = steps.names()
    for later in names[names.index(step) + 1:]:
        steps.remove(later)
    checkout_place(cart_id=cart.pk, checkout_key=f"dead:{cart.pk}", actor="test", steps=steps)
    return Cart.objects.get(pk=cart.pk)


def stock(product) -> int:
    return Product.objects.get(pk=product.pk).stock_on_hand


@pytest.mark.parametrize("step", ["lock_cart", "reserve_inventory", "create_order"])
def test_stuck_checkout_without_payment_is_unwound(product, step):
    cart = died_after(step, product)
    assert cart.state == "checking_out"
    assert checkouts_reconcile_stuck() == []  # inside the grace period nothing is touched

    with clock.travel(6 * 60):
        results = checkouts_reconcile_stuck()
    drain()

    assert [(r["cart_id"], r["action"]) for r in results] == [(cart.pk, "unwound")]
    assert Cart.objects.get(pk=cart.pk).state == "active"
    assert stock(product) == 20
    assert not Reservation.objects.filter(state__in=Reservation.LIVE_STATES).exists()
    expected_orders = ["checkout_failed"] if step == "create_order" else []
    assert list(Order.objects.values_list("state", flat=True)) == expected_orders


def test_stuck_checkout_with_authorized_attempt_is_resumed(product):
    cart = died_after("start_payment", product)
    order = Order.objects.get(checkout_key=f"dead:{cart.pk}")

    with clock.travel(6 * 60):
        results = checkouts_reconcile_stuck()

    assert [(r["action"], r["order_id"]) for r in results] == [("resumed", order.pk)]
    cart = Cart.objects.get(pk=cart.pk)
    assert (cart.state, cart.order_id) == ("converted", order.pk)
    assert Order.objects.get(pk=order.pk).state == "payment_pending" and stock(product) == 18


def test_stuck_checkout_with_failed_attempt_is_unwound_and_voided(product, port):
    cart = died_after("start_payment", product)
    order = Order.objects.get(checkout_key=f"dead:{cart.pk}")
    port.fail(order.current_attempt_ref)

    with clock.travel(6 * 60):
        results = checkouts_reconcile_stuck()
    drain()

    assert results[0]["action"] == "unwound"
    assert Order.objects.get(pk=order.pk).state == "checkout_failed"
    assert Cart.objects.get(pk=cart.pk).state == "active" and stock(product) == 20


def test_reconciling_twice_repeats_nothing(product):
    cart = died_after("create_order", product)
    with clock.travel(6 * 60):
        checkout_reconcile(cart=cart)
        rows = Transition.objects.count()
        again = checkout_reconcile(cart=cart)  # a second reconciler run with the old snapshot

    assert again["action"] == "none"
    assert Transition.objects.count() == rows
    with clock.travel(6 * 60):
        assert reconcile_stuck_checkouts() == 0  # the task: nothing left to do


def test_reconcile_command_runs(product, capsys):
    died_after("reserve_inventory", product)
    with clock.travel(6 * 60):
        call_command("reconcile_checkouts")
    assert '"action": "unwound"' in capsys.readouterr().out


# --- invariant audit ---------------------------------------------------------------------------
def test_audit_is_clean_after_real_flows(place_order, port):
    a, b = place_order(1), place_order(1)
    kernel.apply(a, "cancel", "c", {})
    port.capture(b.current_attempt_ref)
    from tests.orders.conftest import capture

    capture(b)
    drain()

    assert invariant_violations() == []
    call_command("audit_orders")
    assert audit_invariants() == 0


def test_audit_finds_each_planted_violation(product):
    paid = kernel.create(Order, actor="test", state="paid", currency="usd", total_amount=100)  # no capture
    cancelled = kernel.create(Order, actor="test", state="cancelled", currency="usd", total_amount=100)
    kernel.create(Reservation, actor="test", product=product, quantity=1, expires_at=clock.now(),
                  order_id=cancelled.pk)  # a live hold, no release promised
    delivered = kernel.create(Order, actor="test", state="delivered", currency="usd", total_amount=100)
    Transition.objects.create(aggregate_type="orders.order", aggregate_id=delivered.pk, event_type="bogus",
                              event_identity="bogus", payload_hash="x", from_state="delivered", to_state="paid",
                              from_version=1, to_version=2, result="applied", created_at=clock.now())

    found = {(v.invariant, v.aggregate_id) for v in invariant_violations()}

    assert ("paid_implies_capture", paid.pk) in found
    assert ("cancelled_implies_no_live_reservation", cancelled.pk) in found
    assert ("delivered_never_reenters_active", delivered.pk) in found
    assert ("history_replay_equals_row", delivered.pk) in found  # the row says delivered, history says paid
    with pytest.raises(CommandError):
        call_command("audit_orders")


def test_stuck_orders_lists_overdue_waits(place_order):
    order = place_order(1)
    kernel.apply(order, "cancel", "c", {})
    assert stuck_orders() == []

    with clock.travel(10 * 60):
        stuck = stuck_orders()

    assert [(s.order.pk, s.order.state, s.owner) for s in stuck] == [(order.pk, "cancellation_pending", "provider")]

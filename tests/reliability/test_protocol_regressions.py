"""Explicit regressions for what the model-based protocol test found (planted or real), replayed as
plain scenarios against the same machines and the real sandbox provider."""

from __future__ import annotations

import pytest

from orders.models import Order, Reservation
from orders.selectors import invariant_violations
from orders.services import cart_add_item, cart_create, checkout_place, order_cancel, product_create
from workflow import outbox
from workflow.errors import LedgerflowError
from workflow.selectors import all_history_mismatches

pytestmark = pytest.mark.django_db


@pytest.fixture
def payments_port(settings, sandbox):
    settings.ORDERS_PAYMENT_PORT = "orders.payments_adapter.PaymentsAppPort"
    return sandbox


def drain_with_crashes(plan: list[str]) -> None:
    """Deliver everything due; the first deliveries crash as planned ("before"/"after" the effect)."""
    from tests.reliability.test_protocol_model_based import CRASH, crashing

    saved = dict(outbox._registry)
    try:
        for effect_type, config in saved.items():
            outbox._registry[effect_type] = outbox.EffectConfig(effect_type, crashing(config.handler),
                                                                config.max_attempts, 0, 0)
        for _ in range(100):
            if plan:
                CRASH["plan"] = plan.pop(0)
            if outbox.deliver_one() is None:
                break
    finally:
        CRASH.clear()
        outbox._registry.clear()
        outbox._registry.update(saved)


@pytest.mark.parametrize("plan", [[], ["after"], ["before", "after", "after"]])
def test_a_cancelled_order_releases_its_hold_even_when_workers_crash(payments_port, plan):
    """Planted bug found by the protocol test: a release handler that releases nothing leaves a cancelled
    order holding stock (``cancelled_implies_no_live_reservation``)."""
    product = product_create(sku="REG-1", name="Mug", unit_price=2500, currency="usd", stock_on_hand=5)
    cart = cart_create(actor="buyer")
    cart_add_item(cart_id=cart.pk, sku=product.sku, quantity=2, actor="buyer")
    order = checkout_place(cart_id=cart.pk, checkout_key="regression-1", actor="buyer")

    order_cancel(order_id=order.pk, actor="buyer", reason="changed my mind")
    drain_with_crashes(plan)
    drain_with_crashes([])

    assert Order.objects.get(pk=order.pk).state == "cancelled"
    assert set(Reservation.objects.filter(order_id=order.pk).values_list("state", flat=True)) == {"released"}
    assert invariant_violations() == [] and all_history_mismatches() == []
    assert len([r for r in payments_port.ledger()["refunds"] if r["status"] == "succeeded"]) <= 1


def test_each_requeue_of_a_dead_promise_gives_the_effect_types_budget_not_double(settings):
    """Found by the protocol test (soak, seed 777): provider down → dead → requeue, three times; the
    fourth outage never went dead, because each requeue granted ``attempts + max_attempts`` and
    max_attempts already counted the earlier requeues (8, 16, 32 … fresh attempts)."""
    from datetime import timedelta

    from tests.kernel_app.models import Parcel
    from workflow import clock, kernel
    from workflow.models import OutboxItem

    def fail(item):
        raise outbox.RetryableEffectError("provider down")

    saved = dict(outbox._registry)
    outbox.effect_handler("parcel.notify", max_attempts=3, base_delay_seconds=1, replace=True)(fail)
    try:
        parcel = kernel.create(Parcel, actor="test", address="A", weight_grams=0)
        kernel.apply(parcel, "pack", "pack-1", {"weight_grams": 100}, actor="test")
        item = OutboxItem.objects.get(effect_type="parcel.notify", aggregate_id=parcel.pk)
        offset = timedelta(0)
        for round_number in range(1, 5):
            fresh = 0
            while OutboxItem.objects.get(pk=item.pk).state != "dead":
                offset += timedelta(hours=1)
                with clock.travel(offset):
                    outbox.deliver_one(item.pk)
                fresh += 1
                assert fresh <= 3, f"round {round_number}: more than the effect type's 3 attempts"
            assert fresh == 3
            with clock.travel(offset):
                outbox.outbox_requeue(item_id=item.pk, actor="user:olga", reason="provider is back")
    finally:
        outbox._registry.clear()
        outbox._registry.update(saved)


def test_a_finished_checkout_run_again_with_its_key_answers_its_order(payments_port):
    """Seen while explaining ``make chaos``'s 4xx answers to retried checkouts: the database can go
    away after a checkout committed but before the Idempotency-Key claim stored its answer; the
    client's retry then ran the checkout again and got 409 "cart is converted" instead of its order."""
    product = product_create(sku="REG-2", name="Mug", unit_price=2500, currency="usd", stock_on_hand=5)
    cart = cart_create(actor="buyer")
    cart_add_item(cart_id=cart.pk, sku=product.sku, quantity=1, actor="buyer")
    first = checkout_place(cart_id=cart.pk, checkout_key="buyer|key-1", actor="buyer")

    again = checkout_place(cart_id=cart.pk, checkout_key="buyer|key-1", actor="buyer")

    assert again.pk == first.pk and Order.objects.filter(cart_id=cart.pk).count() == 1
    with pytest.raises(LedgerflowError):  # another checkout of the converted cart is still refused
        checkout_place(cart_id=cart.pk, checkout_key="buyer|key-2", actor="buyer")


def test_a_dead_release_is_what_the_audit_reports_until_an_operator_requeues_it(payments_port):
    """Shrunk by the protocol test (soak, seed 777): a paid order is cancelled and refunded; its
    inventory release fails until it is dead. The audit names the order
    (``cancelled_implies_no_live_reservation``) and the dead letter holds the error; the operator's
    requeue releases the stock and the audit is clean again."""
    from datetime import timedelta

    from workflow import clock
    from workflow.models import OutboxItem

    product = product_create(sku="REG-3", name="Mug", unit_price=2500, currency="usd", stock_on_hand=5)
    cart = cart_create(actor="buyer")
    cart_add_item(cart_id=cart.pk, sku=product.sku, quantity=1, actor="buyer")
    order = checkout_place(cart_id=cart.pk, checkout_key="regression-3", actor="buyer")
    drain_with_crashes([])
    assert Order.objects.get(pk=order.pk).state == "paid"
    order_cancel(order_id=order.pk, actor="buyer", reason="changed my mind")

    saved = dict(outbox._registry)

    def down(item):
        raise outbox.RetryableEffectError("reservations unreachable")

    outbox.effect_handler("orders.release_inventory", max_attempts=3, base_delay_seconds=1, replace=True)(down)
    try:
        for hour in range(1, 30):  # every attempt of the release fails, an hour apart, until it is dead
            with clock.travel(timedelta(hours=hour)):
                outbox.deliver_one()
    finally:
        outbox._registry.clear()
        outbox._registry.update(saved)
    release = OutboxItem.objects.get(effect_type="orders.release_inventory", aggregate_id=order.pk)
    assert Order.objects.get(pk=order.pk).state == "cancelled"
    assert release.state == "dead" and "reservations unreachable" in release.last_error
    assert [(v.invariant, v.aggregate_id) for v in invariant_violations()] == [
        ("cancelled_implies_no_live_reservation", order.pk)]

    outbox.outbox_requeue(item_id=release.pk, actor="user:olga", reason="reservations are back")
    with clock.travel(timedelta(days=2)):
        drain_with_crashes([])

    assert set(Reservation.objects.filter(order_id=order.pk).values_list("state", flat=True)) == {"released"}
    assert invariant_violations() == [] and all_history_mismatches() == []

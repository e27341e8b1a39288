"""Explicit regressions for what the model-based protocol test found (planted or real), replayed as
plain scenarios against the same machines and the real sandbox provider."""

from __future__ import annotations

import pytest

from orders.models import Order, Reservation
from orders.selectors import invariant_violations
from orders.services import cart_add_item, cart_create, checkout_place, order_cancel, product_create
from workflow import outbox
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

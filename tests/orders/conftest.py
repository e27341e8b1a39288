"""Fixtures for the orders tests: the payment port double, a shop with stock, orders in given states."""

from __future__ import annotations

import pytest

from orders.models import Order
from orders.payment_port import SimulatedPaymentPort, payment_fact
from orders.services import cart_add_item, cart_create, checkout_place, product_create
from tests.sandbox_provider import sandbox, sandbox_process  # noqa: F401
from workflow import outbox


@pytest.fixture(autouse=True)
def port(settings):
    """The in-process provider double, for tests of the order protocol itself. Tests that request
    ``payments_port`` run against the payments app and the sandbox provider over HTTP instead."""
    settings.ORDERS_PAYMENT_PORT = "orders.payment_port.SimulatedPaymentPort"
    sim = SimulatedPaymentPort.instance()
    sim.reset()
    yield sim
    sim.reset()


@pytest.fixture
def product(db):
    return product_create(sku="MUG-1", name="Mug", unit_price=2500, currency="usd", stock_on_hand=20)


@pytest.fixture
def place_order(db, product):
    """Checkout a cart of ``quantity`` mugs; returns the order in payment_pending."""

    def place(quantity: int = 2, *, key: str | None = None, sku: str | None = None) -> Order:
        cart = cart_create(actor="test")
        cart_add_item(cart_id=cart.pk, sku=sku or product.sku, quantity=quantity, actor="test")
        order = checkout_place(cart_id=cart.pk, checkout_key=key or f"test:{cart.pk}", actor="test")
        order.refresh_from_db()
        return order

    return place


def capture(order: Order, *, attempt_ref: str | None = None, amount: int | None = None, identity=None):
    ref = attempt_ref or order.current_attempt_ref
    return payment_fact(order_id=order.pk, fact="captured", attempt_ref=ref,
                        amount=order.total_amount if amount is None else amount, currency=order.currency,
                        capture_ref=f"ch_{ref}", identity=identity)


def drain() -> list[str]:
    """Deliver every due outbox item (what the workers do), returning the delivery events."""
    events = []
    while (event := outbox.deliver_one()) is not None:
        events.append(event)
    return events

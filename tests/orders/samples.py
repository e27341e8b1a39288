"""Samples for the generic (state × event) table test: aggregates in any state, payloads that pass guards."""

import uuid
from datetime import timedelta

from orders.models import Cart, Order, Product, Reservation
from tests.machines import MachineSamples, register
from workflow import clock, kernel

TOTAL = 5000


def build_order(state: str) -> Order:
    fields = {"currency": "usd", "total_amount": TOTAL, "lines": [{"sku": "S", "quantity": 1, "unit_price": TOTAL}],
              "checkout_key": f"sample:{uuid.uuid4()}"}
    if state not in (Order.State.INVENTORY_RESERVED,):
        fields.update(current_attempt_ref="pay-7", current_provider_ref="pi_7", attempt_count=1)
    if state in (Order.State.PAID, Order.State.FULFILLMENT_PENDING, Order.State.SHIPPED, Order.State.DELIVERED,
                 Order.State.REFUND_PENDING):
        fields.update(capture_ref="cap-7", captured_amount=TOTAL, captured_attempt_ref="pay-7")
    if state == Order.State.REFUND_PENDING:
        fields.update(refund_key="refund:cap-7", refund_round=1)
    return kernel.create(Order, actor="test", state=state, **fields)


register(MachineSamples(
    model=Order,
    build=build_order,
    payloads={
        "payment_started": lambda o: {"attempt_ref": "pay-8", "amount": TOTAL, "currency": "usd"},
        "payment_captured": lambda o: {"attempt_ref": o.current_attempt_ref, "amount": TOTAL, "currency": "usd",
                                       "capture_ref": "cap-new"},
        "payment_failed": lambda o: {"attempt_ref": o.current_attempt_ref},
        "payment_voided": lambda o: {"attempt_ref": o.current_attempt_ref},
        "refund_succeeded": lambda o: {"refund_key": o.refund_key, "amount": o.captured_amount},
        "refund_failed": lambda o: {"refund_key": o.refund_key, "error": "card closed"},
        "resolve": lambda o: {"decision": "cancel"},
        "shipped": lambda o: {"tracking_ref": "TRK1"},
    },
))


def build_cart(state: str) -> Cart:
    extra = {"order_id": 1} if state == Cart.State.CONVERTED else {}
    return kernel.create(Cart, actor="test", state=state, **extra)


register(MachineSamples(
    model=Cart,
    build=build_cart,
    payloads={"checkout_completed": lambda c: {"order_id": 1}, "checkout_started": lambda c: {"checkout_key": "k"}},
))


def build_reservation(state: str) -> Reservation:
    product = Product.objects.create(sku=f"S-{uuid.uuid4().hex[:8]}", name="Sample", unit_price=100, currency="usd",
                                     stock_on_hand=5)
    return kernel.create(Reservation, actor="test", state=state, product=product, quantity=1,
                         expires_at=clock.now() + timedelta(minutes=30))


register(MachineSamples(model=Reservation, build=build_reservation))

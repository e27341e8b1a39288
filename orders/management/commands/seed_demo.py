"""Demo data for ``make run``: a small catalog, and orders sitting in every waiting state of the order
machine (plus a few finished ones), each with the facts its state implies. Idempotent: a second run
adds nothing. Orders are recorded through ``kernel.create``/``apply`` (actor ``demo``), never by hand."""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand
from django.db import transaction

from orders.models import Cart, Order, Product, Reservation
from orders.models.order import refund_key_for
from orders.services import cart_add_item, cart_create, product_create
from workflow import clock, kernel

ACTOR = "demo"
PRODUCTS = [
    ("DEMO-MUG", "Enamel mug", 1800, 120),
    ("DEMO-LAMP", "Desk lamp", 5400, 30),
    ("DEMO-PRINT", "Framed print", 12500, 12),
    ("DEMO-LAST", "Limited edition poster (last units)", 9900, 3),
]
# state → (sku, quantity, extra facts)
WAITING = [
    ("inventory_reserved", "DEMO-MUG", 2, {}),
    ("payment_pending", "DEMO-LAMP", 1, {"attempt": True}),
    ("payment_failed", "DEMO-MUG", 1, {"attempt": True}),
    ("paid", "DEMO-PRINT", 1, {"attempt": True, "capture": True}),
    ("fulfillment_pending", "DEMO-LAMP", 2, {"attempt": True, "capture": True}),
    ("shipped", "DEMO-MUG", 4, {"attempt": True, "capture": True, "tracking_ref": "TRK-DEMO-1"}),
    ("cancellation_pending", "DEMO-PRINT", 1, {"attempt": True, "cancel": True}),
    ("refund_pending", "DEMO-LAMP", 1, {"attempt": True, "capture": True, "cancel": True, "refund": True}),
    ("manual_review", "DEMO-PRINT", 2, {"attempt": True, "capture": True, "cancel": True,
                                        "review_reason": "capture of a high-value order during cancellation"}),
    ("delivered", "DEMO-MUG", 1, {"attempt": True, "capture": True, "tracking_ref": "TRK-DEMO-0"}),
    ("cancelled", "DEMO-MUG", 1, {"cancel": True}),
]
HOLDING = {"inventory_reserved": "held", "payment_pending": "held", "payment_failed": "held",
           "paid": "committed", "fulfillment_pending": "committed", "shipped": "fulfilled",
           "cancellation_pending": "held", "refund_pending": "committed", "manual_review": "held",
           "delivered": "fulfilled", "cancelled": "released"}


class Command(BaseCommand):
    help = "Create demo products and orders in each waiting state (idempotent)."

    def handle(self, *args, **options):
        if Product.objects.filter(sku__startswith="DEMO-").exists():
            self.stdout.write("demo data already present")
            return
        with transaction.atomic():
            products = {sku: product_create(sku=sku, name=name, unit_price=price, currency="eur", stock_on_hand=stock)
                        for sku, name, price, stock in PRODUCTS}
            for number, (state, sku, quantity, facts) in enumerate(WAITING, start=1):
                self._order(number, state, products[sku], quantity, facts)
            cart = cart_create(actor=ACTOR)
            cart_add_item(cart_id=cart.pk, sku="DEMO-LAST", quantity=1, actor=ACTOR)
        self.stdout.write(f"demo data: {len(PRODUCTS)} products, {len(WAITING)} orders, 1 open cart "
                          f"(checkout it: POST /api/v1/checkout {{\"cart_id\": {cart.pk}}})")

    def _order(self, number: int, state: str, product: Product, quantity: int, facts: dict) -> Order:
        now = clock.now()
        total = product.unit_price * quantity
        key = f"demo:{number}"
        fields = {"currency": "eur", "total_amount": total, "checkout_key": key,
                  "lines": [{"sku": product.sku, "name": product.name, "quantity": quantity,
                             "unit_price": product.unit_price, "line_total": total}]}
        ref = f"demo-pay-{number}"
        if facts.get("attempt"):
            fields.update(current_attempt_ref=ref, current_provider_ref=f"pi_demo_{number}", attempt_count=1)
        if facts.get("capture"):
            fields.update(capture_ref=f"ch_demo_{number}", captured_amount=total, captured_attempt_ref=ref)
        if facts.get("cancel"):
            fields["cancel_requested_at"] = now
        if facts.get("refund"):
            fields.update(refund_key=refund_key_for(f"ch_demo_{number}", 1), refund_round=1)
        for name in ("tracking_ref", "review_reason"):
            if name in facts:
                fields[name] = facts[name]
        cart = kernel.create(Cart, actor=ACTOR, reason="demo data", state="converted", order_id=0)
        order = kernel.create(Order, actor=ACTOR, reason="demo data", identity=f"checkout:{key}", state=state,
                              cart_id=cart.pk, **fields)
        Cart.objects.filter(pk=cart.pk).update(order_id=order.pk)  # pointer only; the cart's state is unchanged
        reservation_state = HOLDING[state]
        if reservation_state in ("held", "committed"):
            Product.take_stock(product_id=product.pk, quantity=quantity, now=now)
        kernel.create(Reservation, actor=ACTOR, reason="demo data", state=reservation_state, product=product,
                      quantity=quantity, expires_at=now + timedelta(minutes=45), cart_id=cart.pk,
                      checkout_key=key, order_id=order.pk)
        return order

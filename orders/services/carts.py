from __future__ import annotations

import uuid

from django.db import transaction

from workflow import clock, kernel
from workflow.errors import NotFound, StateTransitionRejected, ValidationFailed

from ..models import Cart, CartItem, Product


def cart_create(*, actor: str) -> Cart:
    return kernel.create(Cart, actor=actor, reason="cart opened")


@transaction.atomic
def cart_add_item(*, cart_id: int, sku: str, quantity: int, actor: str) -> Cart:
    """Add units of a SKU (quantities add up). Only an ``active`` cart takes items: the ``item_added``
    event locks the cart row, so a checkout cannot start half-way through."""
    if quantity <= 0:
        raise ValidationFailed("quantity must be positive", details={"field": "quantity"})
    product = Product.objects.filter(sku=sku).first()
    if product is None:
        raise ValidationFailed(f"unknown sku {sku!r}", details={"field": "sku"})
    if not Cart.objects.filter(pk=cart_id).exists():
        raise NotFound(f"cart {cart_id} not found")
    cart = Cart.objects.get(pk=cart_id)
    if cart.currency and cart.currency != product.currency:
        raise ValidationFailed("all items of a cart must share one currency", details={"field": "sku"})
    outcome = kernel.apply(cart, "item_added", f"item:{uuid.uuid4()}",
                           {"sku": sku, "quantity": quantity, "currency": product.currency}, actor=actor)
    if outcome.result != "applied":
        raise StateTransitionRejected(f"cart {cart_id} is {outcome.state}: items cannot change",
                                      details={"outcome": outcome.as_dict()})
    item, created = CartItem.objects.select_for_update().get_or_create(
        cart=cart, product=product, defaults={"quantity": quantity, "unit_price_seen": product.unit_price})
    if not created:
        item.quantity += quantity
        item.unit_price_seen = product.unit_price
        item.save(update_fields=["quantity", "unit_price_seen"])
    return cart


def cart_touch_time() -> str:
    return clock.now().isoformat()

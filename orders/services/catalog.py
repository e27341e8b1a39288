from __future__ import annotations

from django.db import IntegrityError, transaction

from workflow import clock
from workflow.errors import ValidationFailed

from ..models import Product


def product_create(*, sku: str, name: str, unit_price: int, currency: str, stock_on_hand: int) -> Product:
    if stock_on_hand < 0:
        raise ValidationFailed("stock_on_hand cannot be negative", details={"field": "stock_on_hand"})
    if unit_price <= 0:
        raise ValidationFailed("unit_price must be positive (minor units)", details={"field": "unit_price"})
    now = clock.now()
    try:
        with transaction.atomic():
            return Product.objects.create(sku=sku, name=name, unit_price=unit_price, currency=currency.lower(),
                                          stock_on_hand=stock_on_hand, created_at=now, updated_at=now)
    except IntegrityError:
        raise ValidationFailed(f"a product with sku {sku!r} already exists", details={"field": "sku"})

"""The catalog: products with a price in minor units and a stock count that can never go negative."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.utils import timezone


class Product(models.Model):
    """A sellable SKU. ``stock_on_hand`` is what is free to reserve (held units are already taken out).

    Stock only moves through ``take_stock``/``return_stock`` (guarded single-statement UPDATEs); the
    CHECK constraint is the database's own guarantee behind the guard.
    """

    sku = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    unit_price = models.PositiveBigIntegerField(help_text="minor units (e.g. cents)")
    currency = models.CharField(max_length=3)
    stock_on_hand = models.IntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(stock_on_hand__gte=0), name="product_stock_never_negative"),
            models.CheckConstraint(condition=Q(unit_price__gt=0), name="product_price_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.sku} ({self.stock_on_hand} on hand)"

    @classmethod
    def take_stock(cls, *, product_id: int, quantity: int, now) -> bool:
        """``UPDATE … SET stock = stock - q WHERE id = ? AND stock >= q``: True when the units were taken."""
        return cls.objects.filter(pk=product_id, stock_on_hand__gte=quantity).update(
            stock_on_hand=F("stock_on_hand") - quantity, updated_at=now) == 1

    @classmethod
    def return_stock(cls, *, product_id: int, quantity: int, now) -> None:
        cls.objects.filter(pk=product_id).update(stock_on_hand=F("stock_on_hand") + quantity, updated_at=now)

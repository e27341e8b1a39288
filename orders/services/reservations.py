"""Stock holds. Taking stock and creating its reservation happen in one transaction; giving it back
happens inside the reservation's own ``release``/``expire`` rule."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction

from workflow import clock, kernel
from workflow.errors import OutOfStock

from .. import conf
from ..models import Product, Reservation


@transaction.atomic
def reservations_hold(*, lines: list[dict], cart_id: int | None, checkout_key: str, actor: str) -> list[Reservation]:
    """Hold every line or none: a single short line rolls back the units already taken.

    ``lines`` are ``{"product_id", "sku", "quantity"}``; products are taken in id order so concurrent
    checkouts of overlapping carts queue instead of deadlocking.
    """
    now = clock.now()
    expires_at = now + timedelta(seconds=conf.get("ORDERS_RESERVATION_TTL_SECONDS"))
    held = []
    for line in sorted(lines, key=lambda x: x["product_id"]):
        if not Product.take_stock(product_id=line["product_id"], quantity=line["quantity"], now=now):
            available = Product.objects.filter(pk=line["product_id"]).values_list("stock_on_hand", flat=True).first()
            raise OutOfStock(f"not enough stock for {line['sku']}",
                             details={"sku": line["sku"], "requested": line["quantity"], "available": available})
        held.append(kernel.create(Reservation, actor=actor, reason="checkout holds stock",
                                  product_id=line["product_id"], quantity=line["quantity"], expires_at=expires_at,
                                  cart_id=cart_id, checkout_key=checkout_key))
    return held


def _apply_each(reservations, event: str, identity: str, actor: str, reason: str) -> list[dict]:
    report = []
    for reservation in reservations:
        outcome = kernel.apply(reservation, event, identity, {}, actor=actor, reason=reason)
        report.append({"reservation_id": reservation.pk, "result": outcome.result, "state": outcome.state})
    return report


def reservations_release(*, order_id: int | None = None, checkout_key: str | None = None, actor: str,
                         reason: str) -> list[dict]:
    """Release every live hold of an order (or of a checkout that never made one). Idempotent."""
    qs = Reservation.objects.filter(state__in=Reservation.LIVE_STATES)
    qs = qs.filter(order_id=order_id) if order_id is not None else qs.filter(checkout_key=checkout_key)
    identity = f"release:order:{order_id}" if order_id is not None else f"release:checkout:{checkout_key}"
    return _apply_each(list(qs.order_by("id")), "release", identity, actor, reason)


def reservations_commit(*, order_id: int, actor: str) -> list[dict]:
    qs = Reservation.objects.filter(order_id=order_id, state=Reservation.State.HELD).order_by("id")
    return _apply_each(list(qs), "commit", f"commit:order:{order_id}", actor, "order paid")


def reservations_fulfill(*, order_id: int, actor: str) -> list[dict]:
    qs = Reservation.objects.filter(order_id=order_id, state=Reservation.State.COMMITTED).order_by("id")
    return _apply_each(list(qs), "fulfill", f"fulfill:order:{order_id}", actor, "order shipped")

"""Process death between checkout steps: carts left ``checking_out`` beyond the grace period.

Authorized or captured attempt plus an existing order → resume finalization (the cart converts; the
order continues through its own timers). Otherwise → void what can be voided, release stock,
unwind the order if one exists, reactivate the cart. Idempotent: every step is an ``apply`` with a
fixed identity, so running the reconciler twice (or concurrently) repeats nothing.
"""

from __future__ import annotations

import logging

from workflow import kernel

from .. import conf
from ..models import Cart, Order
from ..payment_port import get_port
from ..selectors import stuck_checkout_carts
from .reservations import reservations_release

logger = logging.getLogger(__name__)
ACTOR = "system:checkout-reconciler"


def checkout_reconcile(*, cart: Cart) -> dict:
    cart = Cart.objects.get(pk=cart.pk)  # judge the current row, not the caller's snapshot
    if cart.state != Cart.State.CHECKING_OUT:
        return {"cart_id": cart.pk, "action": "none", "result": f"cart is {cart.state}"}
    key = cart.checkout_key
    order = Order.objects.filter(checkout_key=key).first() if key else None
    if order is not None and order.current_attempt_ref:
        status = get_port().attempt_status(attempt_ref=order.current_attempt_ref).status
        if status in ("authorized", "captured", "pending") and order.state in (
                Order.State.PAYMENT_PENDING, Order.State.PAID, Order.State.CANCELLATION_PENDING,
                Order.State.REFUND_PENDING):
            outcome = kernel.apply(cart, "checkout_completed", f"completed:{key}", {"order_id": order.pk},
                                   actor=ACTOR, reason="reconciler resumed a stuck checkout")
            return {"cart_id": cart.pk, "action": "resumed", "order_id": order.pk, "result": outcome.result}
    report: list[dict] = []
    if order is not None:
        outcome = kernel.apply(order, "checkout_unwound", "checkout-unwound",
                               {"report": [{"step": "reconciler", "detail": "checkout process died"}]},
                               actor=ACTOR, reason="reconciler unwound a stuck checkout")
        report.append({"order_id": order.pk, "unwound": outcome.result, "state": outcome.state})
    released = reservations_release(checkout_key=key, actor=ACTOR, reason="reconciler unwound a stuck checkout")
    report.append({"released": released})
    outcome = kernel.apply(cart, "checkout_unwound", f"unwind:{key}", {}, actor=ACTOR,
                           reason="reconciler unwound a stuck checkout")
    return {"cart_id": cart.pk, "action": "unwound", "order_id": order.pk if order else None,
            "result": outcome.result, "report": report}


def checkouts_reconcile_stuck(*, grace_seconds: int | None = None) -> list[dict]:
    grace = conf.get("ORDERS_CHECKOUT_GRACE_SECONDS") if grace_seconds is None else grace_seconds
    results = []
    for cart in stuck_checkout_carts(grace_seconds=grace):
        try:
            results.append(checkout_reconcile(cart=cart))
        except Exception as exc:  # noqa: BLE001 - one broken cart must not stop the others
            logger.exception("reconciling cart %s failed", cart.pk)
            results.append({"cart_id": cart.pk, "action": "error", "error": str(exc)})
    return results

"""The checkout saga: validate and reprice, lock the cart, reserve inventory, create the order, start
the payment attempt, finalize. Each step commits on its own (so a crash leaves durable progress the
reconciler can resume or unwind); a step that acquires something declares its compensation, and a
failure compensates the completed steps in reverse order. The report goes with ``E_WORKFLOW_FAILED``.

Customise through the registry, not around it::

    steps = default_steps().insert_after("reserve_inventory", Step("fraud_check", run=..., compensate=None))
    checkout_place(cart_id=..., checkout_key=..., actor=..., steps=steps)

A custom step receives the ``CheckoutContext`` (cart, priced lines, reservations, order, attempt).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction

from workflow import kernel
from workflow.errors import (
    LedgerflowError,
    NotFound,
    OutOfStock,
    StateTransitionRejected,
    ValidationFailed,
    WorkflowFailed,
)

from ..models import Cart, Order, Product, Reservation
from ..payment_port import AttemptStarted, get_port
from .reservations import reservations_hold, reservations_release

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class CheckoutContext:
    cart_id: int
    checkout_key: str
    actor: str
    cart: Cart | None = None
    lines: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    currency: str = ""
    total_amount: int = 0
    reservations: list[Reservation] = dataclasses.field(default_factory=list)
    order: Order | None = None
    attempt: AttemptStarted | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[CheckoutContext], None]
    compensate: Callable[[CheckoutContext], str] | None = None  # returns a short description of what it undid


class StepRegistry:
    """An ordered list of steps with insert_before / insert_after / replace / remove (each returns self)."""

    def __init__(self, steps: list[Step]) -> None:
        self._steps = list(steps)

    def names(self) -> list[str]:
        return [s.name for s in self._steps]

    def __iter__(self):
        return iter(list(self._steps))

    def _index(self, name: str) -> int:
        for i, step in enumerate(self._steps):
            if step.name == name:
                return i
        raise KeyError(f"no checkout step named {name!r}")

    def _check_new(self, step: Step) -> None:
        if step.name in self.names():
            raise ValueError(f"a checkout step named {step.name!r} already exists")

    def insert_before(self, name: str, step: Step) -> StepRegistry:
        self._check_new(step)
        self._steps.insert(self._index(name), step)
        return self

    def insert_after(self, name: str, step: Step) -> StepRegistry:
        self._check_new(step)
        self._steps.insert(self._index(name) + 1, step)
        return self

    def replace(self, name: str, step: Step) -> StepRegistry:
        self._steps[self._index(name)] = step
        return self

    def remove(self, name: str) -> StepRegistry:
        del self._steps[self._index(name)]
        return self

    def copy(self) -> StepRegistry:
        return StepRegistry(self._steps)


# --- the default steps -------------------------------------------------------------------------------
def validate_and_reprice(ctx: CheckoutContext) -> None:
    cart = Cart.objects.filter(pk=ctx.cart_id).first()
    if cart is None:
        raise NotFound(f"cart {ctx.cart_id} not found")
    if cart.state != Cart.State.ACTIVE:
        raise StateTransitionRejected(f"cart {cart.pk} is {cart.state}, not active",
                                      details={"cart_id": cart.pk, "state": cart.state})
    items = list(cart.items.select_related("product").order_by("product_id"))
    if not items:
        raise ValidationFailed("the cart is empty", details={"cart_id": cart.pk})
    ctx.cart = cart
    ctx.lines = []
    for item in items:
        product: Product = item.product
        ctx.lines.append({"product_id": product.pk, "sku": product.sku, "name": product.name,
                          "quantity": item.quantity, "unit_price": product.unit_price,
                          "price_changed": product.unit_price != item.unit_price_seen,
                          "line_total": product.unit_price * item.quantity})
    currencies = {item.product.currency for item in items}
    if len(currencies) != 1:
        raise ValidationFailed("cart mixes currencies", details={"currencies": sorted(currencies)})
    ctx.currency = currencies.pop()
    ctx.total_amount = sum(line["line_total"] for line in ctx.lines)


def lock_cart(ctx: CheckoutContext) -> None:
    outcome = kernel.apply((Cart, ctx.cart_id), "checkout_started", f"checkout:{ctx.checkout_key}",
                           {"checkout_key": ctx.checkout_key}, actor=ctx.actor)
    if outcome.result != "applied":
        raise StateTransitionRejected(f"cart {ctx.cart_id} could not be locked for checkout ({outcome.result})",
                                      details={"outcome": outcome.as_dict()})
    locked = Cart.objects.get(pk=ctx.cart_id)
    if ctx.cart is not None and locked.items_updated_at != ctx.cart.items_updated_at:
        # Items changed between pricing and locking: the priced lines are not what is being bought.
        raise StateTransitionRejected(f"cart {ctx.cart_id} changed during checkout; try again",
                                      details={"cart_id": ctx.cart_id})


def unlock_cart(ctx: CheckoutContext) -> str:
    if Cart.objects.filter(pk=ctx.cart_id, state=Cart.State.CHECKING_OUT, checkout_key=ctx.checkout_key).count() == 0:
        return f"cart {ctx.cart_id} was not locked by this checkout"
    outcome = kernel.apply((Cart, ctx.cart_id), "checkout_unwound", f"unwind:{ctx.checkout_key}", {},
                           actor=ctx.actor, reason="checkout compensation")
    return f"cart {ctx.cart_id} back to {outcome.state} ({outcome.result})"


def reserve_inventory(ctx: CheckoutContext) -> None:
    ctx.reservations = reservations_hold(lines=ctx.lines, cart_id=ctx.cart_id, checkout_key=ctx.checkout_key,
                                         actor=ctx.actor)


def release_inventory(ctx: CheckoutContext) -> str:
    report = reservations_release(checkout_key=ctx.checkout_key, actor=ctx.actor, reason="checkout compensation")
    return f"released {sum(1 for r in report if r['result'] == 'applied')} reservation(s)"


def create_order(ctx: CheckoutContext) -> None:
    with transaction.atomic():
        ctx.order = kernel.create(
            Order, actor=ctx.actor, reason="checkout", identity=f"checkout:{ctx.checkout_key}",
            payload={"cart_id": ctx.cart_id}, state=Order.State.INVENTORY_RESERVED, cart_id=ctx.cart_id,
            checkout_key=ctx.checkout_key, currency=ctx.currency, total_amount=ctx.total_amount,
            lines=[{k: line[k] for k in ("sku", "name", "quantity", "unit_price", "line_total")} for line in ctx.lines])
        # The reservations now belong to the order (a plain pointer, not a state change).
        Reservation.objects.filter(pk__in=[r.pk for r in ctx.reservations]).update(order_id=ctx.order.pk)


def unwind_order(ctx: CheckoutContext) -> str:
    if ctx.order is None:
        return "no order was created"
    report = ctx.extra.get("report_so_far", [])
    outcome = kernel.apply(ctx.order, "checkout_unwound", "checkout-unwound", {"report": report},
                           actor=ctx.actor, reason="checkout compensation")
    return f"order {ctx.order.pk} → {outcome.state} ({outcome.result})"


@transaction.atomic
def start_payment(ctx: CheckoutContext) -> None:
    # One transaction: with the payments app both the attempt (and its promised provider call) and the
    # order's pointer to it commit together, or neither does.
    port = get_port()
    ctx.attempt = port.start_attempt(order_id=ctx.order.pk, amount=ctx.total_amount, currency=ctx.currency,
                                     idempotency_key=f"{ctx.checkout_key}:attempt-1")
    outcome = kernel.apply(ctx.order, "payment_started", f"attempt:{ctx.attempt.attempt_ref}:started",
                           {"attempt_ref": ctx.attempt.attempt_ref, "attempt_id": ctx.attempt.attempt_id,
                            "provider_ref": ctx.attempt.provider_ref, "amount": ctx.total_amount,
                            "currency": ctx.currency}, actor=ctx.actor)
    if not outcome.accepted:
        raise StateTransitionRejected(f"order {ctx.order.pk} refused the payment attempt ({outcome.result})",
                                      details={"outcome": outcome.as_dict()})


def void_payment(ctx: CheckoutContext) -> str:
    from ..models.order import void_key

    if ctx.attempt is None:
        return "no payment attempt was started"
    answer = get_port().request_void(order_id=ctx.order.pk, attempt_ref=ctx.attempt.attempt_ref,
                                     idempotency_key=void_key(ctx.attempt.attempt_ref))
    return f"void of {ctx.attempt.attempt_ref}: {answer}"


def finalize(ctx: CheckoutContext) -> None:
    outcome = kernel.apply((Cart, ctx.cart_id), "checkout_completed", f"completed:{ctx.checkout_key}",
                           {"order_id": ctx.order.pk}, actor=ctx.actor)
    if not outcome.accepted:
        raise StateTransitionRejected(f"cart {ctx.cart_id} could not be converted ({outcome.result})",
                                      details={"outcome": outcome.as_dict()})


def default_steps() -> StepRegistry:
    return StepRegistry([
        Step("validate_and_reprice", validate_and_reprice),
        Step("lock_cart", lock_cart, unlock_cart),
        Step("reserve_inventory", reserve_inventory, release_inventory),
        Step("create_order", create_order, unwind_order),
        Step("start_payment", start_payment, void_payment),
        Step("finalize", finalize),
    ])


# --- the runner -------------------------------------------------------------------------------------
# Errors that describe the request rather than a broken step: compensate, then re-raise them as they are.
PASS_THROUGH = (OutOfStock, ValidationFailed, NotFound)


def checkout_place(*, cart_id: int, checkout_key: str, actor: str, steps: StepRegistry | None = None) -> Order:
    placed = Order.objects.filter(checkout_key=checkout_key, cart_id=cart_id).first()
    if placed is not None and Cart.objects.filter(pk=cart_id, state=Cart.State.CONVERTED, order_id=placed.pk).exists():
        # The same checkout again after it finished (e.g. the database went away before the caller's
        # Idempotency-Key claim recorded the answer): the order it placed, not a 409 about the cart.
        return placed
    ctx = CheckoutContext(cart_id=cart_id, checkout_key=checkout_key, actor=actor)
    completed: list[Step] = []
    for step in steps or default_steps():
        try:
            step.run(ctx)
        except Exception as exc:  # noqa: BLE001 - any failure of a step unwinds the saga
            # The failing step may have acquired part of its resource before failing: its own
            # compensation runs first (compensations tolerate having nothing to undo).
            report = _compensate(ctx, [*completed, step])
            if isinstance(exc, PASS_THROUGH) or (isinstance(exc, LedgerflowError) and not report):
                if report:
                    exc.details = {**exc.details, "compensation": report}
                raise
            raise WorkflowFailed(
                f"checkout failed at step {step.name!r}; completed steps were compensated",
                details={"failed_step": step.name, "error": _describe(exc),
                         "completed_steps": [s.name for s in completed], "compensation": report,
                         "order_id": ctx.order.pk if ctx.order else None})
        completed.append(step)
    return ctx.order


def _compensate(ctx: CheckoutContext, completed: list[Step]) -> list[dict]:
    report: list[dict] = []
    for step in reversed(completed):
        if step.compensate is None:
            continue
        ctx.extra["report_so_far"] = list(report)
        try:
            report.append({"step": step.name, "ok": True, "detail": step.compensate(ctx)})
        except Exception as exc:  # noqa: BLE001 - keep unwinding; the reconciler finishes what is left
            logger.exception("checkout compensation of %s failed", step.name)
            report.append({"step": step.name, "ok": False, "detail": _describe(exc)})
    return report


def _describe(exc: BaseException) -> str:
    if isinstance(exc, LedgerflowError):
        return f"{exc.code}: {exc.message}"
    return f"{exc.__class__.__name__}: {exc}"

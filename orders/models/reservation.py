"""Reservations: each owns one stock hold (units taken out of ``Product.stock_on_hand``) and its expiry."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django_fsm import FSMField, transition
from simple_history.models import HistoricalRecords

from workflow.history import ActorHistory
from workflow.machine import StateMachine, WaitPolicy

from .catalog import Product


class Reservation(StateMachine):
    """``held → committed | released | expired``; ``committed → fulfilled | released``.

    * held: units taken from stock for a checkout, expiring at ``expires_at`` (timer ``expire``).
    * committed: the order was paid; the hold no longer expires (it is the order's stock now).
    * fulfilled: the goods shipped; the units left the warehouse.
    * released / expired: the units went back to stock (the rule returns them in the same transaction).
    """

    class State(models.TextChoices):
        HELD = "held"
        COMMITTED = "committed"
        FULFILLED = "fulfilled"
        RELEASED = "released"
        EXPIRED = "expired"

    LIVE_STATES = (State.HELD, State.COMMITTED)
    MACHINE_NAME = "reservation"
    TERMINAL_STATES = frozenset({State.FULFILLED, State.RELEASED, State.EXPIRED})
    WAIT_POLICIES = {
        State.HELD: WaitPolicy(timer_event="expire", deadline_field="expires_at", owner="system",
                               note="stock returns to the shelf when the hold expires"),
        State.COMMITTED: WaitPolicy(escalate_after_seconds=14 * 24 * 3600, owner="warehouse",
                                    note="held for a paid order until it ships or is cancelled"),
    }

    state = FSMField(default=State.HELD, choices=State.choices, protected=True)
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="reservations")
    quantity = models.PositiveIntegerField()
    expires_at = models.DateTimeField()
    cart_id = models.BigIntegerField(null=True, blank=True)
    checkout_key = models.CharField(max_length=255, blank=True, default="")
    order_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    history = HistoricalRecords(bases=[ActorHistory])

    class Meta:
        indexes = [
            models.Index(fields=["checkout_key"], name="reservation_checkout"),
            # The console's waiting list and dashboard: state filter, oldest first.
            models.Index(fields=["state", "entered_state_at"], name="reservation_state_age"),
        ]
        constraints = [models.CheckConstraint(condition=Q(quantity__gt=0), name="reservation_quantity_positive")]

    def __str__(self) -> str:
        return f"reservation#{self.pk} {self.quantity}×{self.product_id} [{self.state}]"

    def _return_units(self, ctx) -> None:
        Product.return_stock(product_id=self.product_id, quantity=self.quantity, now=ctx.now)

    @transition(field=state, source=State.HELD, target=State.COMMITTED)
    def commit(self, ctx):
        pass

    @transition(field=state, source=State.COMMITTED, target=State.FULFILLED)
    def fulfill(self, ctx):
        pass

    @transition(field=state, source=[State.HELD, State.COMMITTED], target=State.RELEASED)
    def release(self, ctx):
        self._return_units(ctx)

    @transition(field=state, source=State.HELD, target=State.EXPIRED)
    def expire(self, ctx):
        self._return_units(ctx)
        if self.order_id:
            # The order decides what a lost hold means for it (cancel, or nothing if already settled).
            ctx.emit("orders.reservation_expired", key=f"reservation:{self.pk}:expired",
                     payload={"order_id": self.order_id, "reservation_id": self.pk})

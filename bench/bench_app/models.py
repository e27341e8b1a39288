"""Bench-only machines, installed by bench.settings alone (never by the product settings).

``BenchOrder`` is shaped like an order: a handful of states, one outbox effect per transition, a
history row per change, written only through ``workflow.kernel``. ``NaiveOrder`` is the same life
written the way a team would by hand with the same libraries (django-fsm transition + ``save()`` +
simple-history's post_save signal + ``delay_on_commit``): the naive baseline of case 3.
When orders.Order lands, bench/subject.py points the cases at it instead of ``BenchOrder``.
"""

from django.db import models
from django_fsm import FSMField, transition
from simple_history.models import HistoricalRecords

from workflow.history import ActorHistory
from workflow.machine import StateMachine, WaitPolicy

EFFECT = "workflow.noop"  # the no-op handler: the bench measures the machinery, not a provider


class BenchOrder(StateMachine):
    class State(models.TextChoices):
        PAYMENT_PENDING = "payment_pending"
        PAID = "paid"
        FULFILLMENT_PENDING = "fulfillment_pending"
        SHIPPED = "shipped"
        DELIVERED = "delivered"
        CANCELLED = "cancelled"

    MACHINE_NAME = "bench_order"
    TERMINAL_STATES = frozenset({State.DELIVERED, State.CANCELLED})
    # Escalations only: no timer rows, so a transition writes exactly what the floor case writes.
    WAIT_POLICIES = {
        State.PAYMENT_PENDING: WaitPolicy(escalate_after_seconds=900, owner="payments"),
        State.PAID: WaitPolicy(escalate_after_seconds=3600, owner="warehouse"),
        State.FULFILLMENT_PENDING: WaitPolicy(escalate_after_seconds=86400, owner="warehouse"),
        State.SHIPPED: WaitPolicy(escalate_after_seconds=7 * 86400, owner="carrier"),
    }

    state = FSMField(default=State.PAYMENT_PENDING, choices=State.choices, protected=True)
    reference = models.CharField(max_length=40, blank=True, default="")
    amount_cents = models.PositiveIntegerField(default=0)
    currency = models.CharField(max_length=3, default="EUR")
    history = HistoricalRecords(bases=[ActorHistory])

    class Meta:
        indexes = [
            # The console's waiting-states query: oldest first within a state.
            models.Index(fields=["state", "entered_state_at"], name="bench_order_waiting"),
        ]

    @transition(field=state, source=State.PAYMENT_PENDING, target=State.PAID)
    def payment_captured(self, ctx):
        ctx.emit(EFFECT, key=f"bench_order:{self.pk}:receipt", payload={"order": self.pk})

    @transition(field=state, source=State.PAID, target=State.FULFILLMENT_PENDING)
    def fulfillment_requested(self, ctx):
        ctx.emit(EFFECT, key=f"bench_order:{self.pk}:pick-list", payload={"order": self.pk})

    @transition(field=state, source=State.FULFILLMENT_PENDING, target=State.SHIPPED)
    def shipped(self, ctx):
        ctx.emit(EFFECT, key=f"bench_order:{self.pk}:shipping-mail", payload={"order": self.pk})

    @transition(field=state, source=State.SHIPPED, target=State.DELIVERED)
    def delivery_confirmed(self, ctx):
        ctx.emit(EFFECT, key=f"bench_order:{self.pk}:review-request", payload={"order": self.pk})

    @transition(field=state, source=[State.PAYMENT_PENDING, State.PAID], target=State.CANCELLED)
    def cancel(self, ctx):
        ctx.emit(EFFECT, key=f"bench_order:{self.pk}:release", payload={"order": self.pk})


class NaiveOrder(models.Model):
    """The hand-written pattern: no identities, no version, history from simple-history's signal."""

    State = BenchOrder.State

    state = FSMField(default=State.PAYMENT_PENDING, choices=State.choices)
    reference = models.CharField(max_length=40, blank=True, default="")
    amount_cents = models.PositiveIntegerField(default=0)
    currency = models.CharField(max_length=3, default="EUR")
    updated_at = models.DateTimeField(auto_now=True)
    history = HistoricalRecords()

    def __str__(self) -> str:
        return f"naive order {self.pk} [{self.state}]"

    @transition(field=state, source=State.PAYMENT_PENDING, target=State.PAID)
    def payment_captured(self):
        pass

    @transition(field=state, source=State.PAID, target=State.FULFILLMENT_PENDING)
    def fulfillment_requested(self):
        pass

    @transition(field=state, source=State.FULFILLMENT_PENDING, target=State.SHIPPED)
    def shipped(self):
        pass

    @transition(field=state, source=State.SHIPPED, target=State.DELIVERED)
    def delivery_confirmed(self):
        pass

    @transition(field=state, source=[State.PAYMENT_PENDING, State.PAID], target=State.CANCELLED)
    def cancel(self):
        pass

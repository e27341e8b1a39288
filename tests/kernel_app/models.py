"""A small parcel machine that exercises every kernel feature: effects, guards of each outcome,
review routing, timers from wait policies, repairs. Only installed by config.settings_test."""

from datetime import timedelta

from django.db import models
from django_fsm import RETURN_VALUE, FSMField, transition
from simple_history.models import HistoricalRecords

from workflow.history import ActorHistory
from workflow.machine import StateMachine, WaitPolicy, guard


@guard(result="needs_review", detail="declared weight differs from the measured weight")
def weight_matches(parcel, ctx) -> bool:
    return int(ctx.payload.get("weight_grams", -1)) == parcel.weight_grams


@guard(result="stale", detail="the event names a carrier booking that is no longer current")
def booking_is_current(parcel, ctx) -> bool:
    return ctx.payload.get("booking") == parcel.booking


@guard(detail="a parcel needs an address before it can be packed")
def has_address(parcel, ctx) -> bool:
    return bool(parcel.address)


class Parcel(StateMachine):
    class State(models.TextChoices):
        CREATED = "created"
        PACKED = "packed"
        SHIPPED = "shipped"
        DELIVERED = "delivered"
        CANCELLED = "cancelled"
        MANUAL_REVIEW = "manual_review"

    MACHINE_NAME = "parcel"
    TERMINAL_STATES = frozenset({State.DELIVERED, State.CANCELLED})
    WAIT_POLICIES = {
        State.CREATED: WaitPolicy(timer_event="abandon", after_seconds=3600, owner="shop"),
        State.PACKED: WaitPolicy(escalate_after_seconds=600, owner="warehouse"),
        # A fixed deadline (set once when first shipped), like a print job's expires_at.
        State.SHIPPED: WaitPolicy(timer_event="lost_in_transit", deadline_field="deliver_by", owner="carrier"),
        State.MANUAL_REVIEW: WaitPolicy(escalate_after_seconds=0, owner="operators"),
    }
    REVIEW_EVENT = "route_to_review"

    state = FSMField(default=State.CREATED, choices=State.choices, protected=True)
    address = models.CharField(max_length=200, blank=True, default="")
    weight_grams = models.PositiveIntegerField(default=0)
    booking = models.CharField(max_length=50, blank=True, default="")
    deliver_by = models.DateTimeField(null=True, blank=True)
    notes = models.JSONField(default=list, blank=True)
    history = HistoricalRecords(bases=[ActorHistory])

    @transition(field=state, source=State.CREATED, target=State.PACKED, conditions=[has_address])
    def pack(self, ctx):
        self.weight_grams = int(ctx.payload["weight_grams"])
        ctx.emit("parcel.notify", key=f"parcel:{self.pk}:packing-slip", payload={"parcel": self.pk})

    @transition(field=state, source=State.PACKED, target=State.SHIPPED, conditions=[weight_matches])
    def ship(self, ctx):
        self.booking = ctx.payload["booking"]
        self.deliver_by = self.deliver_by or ctx.now + timedelta(days=1)
        ctx.emit("parcel.notify", key=f"parcel:{self.pk}:carrier-handoff:{self.booking}")

    @transition(field=state, source=State.SHIPPED, target=State.SHIPPED)
    def rebook(self, ctx):
        self.booking = ctx.payload["booking"]

    @transition(field=state, source=State.SHIPPED, target=State.DELIVERED, conditions=[booking_is_current])
    def deliver(self, ctx):
        self.notes = [*self.notes, f"delivered under {self.booking}"]

    @transition(field=state, source=[State.CREATED, State.PACKED], target=State.CANCELLED)
    def cancel(self, ctx):
        if ctx.payload.get("refuse"):
            raise ctx.reject("illegal", "refused by the rule itself")

    @transition(field=state, source=State.CREATED, target=State.CANCELLED)
    def abandon(self, ctx):
        pass

    @transition(field=state, source=State.SHIPPED, target=State.MANUAL_REVIEW)
    def lost_in_transit(self, ctx):
        pass

    @transition(field=state, source=[State.PACKED, State.SHIPPED], target=State.MANUAL_REVIEW)
    def route_to_review(self, ctx):
        pass

    @transition(field=state, source=State.MANUAL_REVIEW, target=RETURN_VALUE(State.SHIPPED, State.CANCELLED),
                custom={"repair": True})
    def resolve(self, ctx):
        return self.State.SHIPPED if ctx.payload.get("decision") == "ship" else self.State.CANCELLED

"""Carts: what a buyer is about to order, and whether a checkout currently owns it."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django_fsm import FSMField, transition
from simple_history.models import HistoricalRecords

from workflow.history import ActorHistory
from workflow.machine import StateMachine, WaitPolicy

from .. import conf


class Cart(StateMachine):
    """``active → checking_out → converted``; ``checking_out → active`` when a checkout unwinds.

    While ``checking_out`` the cart belongs to one checkout: items cannot change (``item_added`` has
    no rule there). ``checkout_round`` counts unwound checkouts so a retry after a failure gets a
    fresh default idempotency key, while a retry after success replays the stored order.
    """

    class State(models.TextChoices):
        ACTIVE = "active"
        CHECKING_OUT = "checking_out"
        CONVERTED = "converted"

    MACHINE_NAME = "cart"
    TERMINAL_STATES = frozenset({State.CONVERTED})
    WAIT_POLICIES = {
        State.ACTIVE: WaitPolicy(escalate_after_seconds=30 * 24 * 3600, owner="buyer",
                                 note="an open cart waits for its buyer"),
        State.CHECKING_OUT: WaitPolicy(escalate_after_seconds=conf.get("ORDERS_CHECKOUT_GRACE_SECONDS"),
                                       owner="checkout reconciler",
                                       note="reconcile_checkouts resumes or unwinds it after the grace period"),
    }

    state = FSMField(default=State.ACTIVE, choices=State.choices, protected=True)
    currency = models.CharField(max_length=3, blank=True, default="")
    items_updated_at = models.DateTimeField(default=timezone.now)
    checkout_round = models.PositiveIntegerField(default=0)
    checkout_key = models.CharField(max_length=255, blank=True, default="")
    order_id = models.BigIntegerField(null=True, blank=True)
    history = HistoricalRecords(bases=[ActorHistory])

    class Meta:
        indexes = [models.Index(fields=["state", "entered_state_at"], name="cart_state_age")]
        constraints = [models.CheckConstraint(condition=~Q(state="converted") | Q(order_id__isnull=False),
                                              name="cart_converted_has_order")]

    def __str__(self) -> str:
        return f"cart#{self.pk} [{self.state}]"

    def default_checkout_key(self) -> str:
        return f"cart:{self.pk}:round:{self.checkout_round}:items:{self.items_updated_at.isoformat()}"

    @transition(field=state, source=State.ACTIVE, target=State.ACTIVE)
    def item_added(self, ctx):
        self.items_updated_at = ctx.now
        if not self.currency:
            self.currency = ctx.payload.get("currency", "")

    @transition(field=state, source=State.ACTIVE, target=State.CHECKING_OUT)
    def checkout_started(self, ctx):
        self.checkout_key = ctx.payload.get("checkout_key", "")

    @transition(field=state, source=State.CHECKING_OUT, target=State.ACTIVE)
    def checkout_unwound(self, ctx):
        self.checkout_round += 1
        self.checkout_key = ""

    @transition(field=state, source=State.CHECKING_OUT, target=State.CONVERTED)
    def checkout_completed(self, ctx):
        self.order_id = int(ctx.payload["order_id"])


class CartItem(models.Model):
    cart = models.ForeignKey(Cart, on_delete=models.CASCADE, related_name="items")
    product = models.ForeignKey("orders.Product", on_delete=models.PROTECT, related_name="+")
    quantity = models.PositiveIntegerField()
    unit_price_seen = models.PositiveBigIntegerField(help_text="price when added; checkout reprices")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cart", "product"], name="cart_item_once_per_product"),
            models.CheckConstraint(condition=Q(quantity__gt=0), name="cart_item_quantity_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.quantity}× product {self.product_id} in cart {self.cart_id}"

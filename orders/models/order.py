"""The order: the buyer-facing lifecycle, and the protocol for payment facts racing cancellation.

The order owns whether checkout may advance, must unwind, or is finished. It does not own the stock
hold (``Reservation``), the provider request and outcome identities (the payment attempt, in
``payments``), or delivery of outside work (the outbox). Every rule below is one row of
docs/order-transitions.md; the method name is the event type.

Provider facts arrive as events whose identity names the fact, not the transport
(``payment:<attempt_ref>:captured``), so the same capture learnt from a webhook, from a provider
query or from a void that found the money already captured is one event, applied once.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.db.models import Q
from django_fsm import RETURN_VALUE, FSMField, transition
from simple_history.models import HistoricalRecords

from workflow.history import ActorHistory
from workflow.machine import StateMachine, WaitPolicy, guard

from .. import conf


# --- effect keys: stable, derived from the fact that owes the work ---------------------------------
def void_key(attempt_ref: str) -> str:
    return f"void:{attempt_ref}"


def refund_key_for(capture_ref: str, refund_round: int) -> str:
    # Keyed by the capture: however often the promise is retried, the provider sees one refund.
    return f"refund:{capture_ref}" if refund_round <= 1 else f"refund:{capture_ref}:round-{refund_round}"


def release_key(order_id: int) -> str:
    return f"order:{order_id}:release-inventory"


# --- guards ------------------------------------------------------------------------------------
@guard(result="stale", detail="the event is for a payment attempt that is not the order's current attempt")
def attempt_is_current(order, ctx) -> bool:
    return bool(order.current_attempt_ref) and ctx.payload.get("attempt_ref") == order.current_attempt_ref


@guard(result="needs_review", detail="captured amount or currency differs from the order total")
def capture_amount_matches(order, ctx) -> bool:
    return (_int(ctx.payload.get("amount")) == order.total_amount
            and str(ctx.payload.get("currency", "")).lower() == order.currency.lower())


@guard(result="stale", detail="this capture is already recorded on the order")
def capture_not_recorded(order, ctx) -> bool:
    return not order.capture_ref or ctx.payload.get("capture_ref") != order.capture_ref


@guard(detail="the new payment attempt must be for the order total in the order currency")
def attempt_amount_matches(order, ctx) -> bool:
    return (_int(ctx.payload.get("amount")) == order.total_amount
            and str(ctx.payload.get("currency", "")).lower() == order.currency.lower()
            and bool(ctx.payload.get("attempt_ref")))


@guard(result="stale", detail="the event is for a refund that is not the order's current refund")
def refund_is_current(order, ctx) -> bool:
    return bool(order.refund_key) and ctx.payload.get("refund_key") == order.refund_key


@guard(result="needs_review", detail="refunded amount differs from the captured amount")
def refund_amount_matches(order, ctx) -> bool:
    return _int(ctx.payload.get("amount")) == order.captured_amount


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class Order(StateMachine):
    class State(models.TextChoices):
        INVENTORY_RESERVED = "inventory_reserved"
        PAYMENT_PENDING = "payment_pending"
        PAYMENT_FAILED = "payment_failed"
        PAID = "paid"
        FULFILLMENT_PENDING = "fulfillment_pending"
        SHIPPED = "shipped"
        DELIVERED = "delivered"
        CANCELLATION_PENDING = "cancellation_pending"
        REFUND_PENDING = "refund_pending"
        CANCELLED = "cancelled"
        MANUAL_REVIEW = "manual_review"
        CHECKOUT_FAILED = "checkout_failed"

    S = State
    # States in which the order still moves towards delivery (delivered never returns to one of them).
    ACTIVE_STATES = frozenset({S.INVENTORY_RESERVED, S.PAYMENT_PENDING, S.PAYMENT_FAILED, S.PAID,
                               S.FULFILLMENT_PENDING, S.SHIPPED})
    # States whose order must have a recorded capture.
    CAPTURED_STATES = frozenset({S.PAID, S.FULFILLMENT_PENDING, S.SHIPPED, S.DELIVERED})

    MACHINE_NAME = "order"
    TERMINAL_STATES = frozenset({S.DELIVERED, S.CANCELLED, S.CHECKOUT_FAILED})
    REVIEW_EVENT = "route_to_review"
    WAIT_POLICIES = {
        S.INVENTORY_RESERVED: WaitPolicy(escalate_after_seconds=conf.get("ORDERS_CHECKOUT_GRACE_SECONDS"),
                                         owner="checkout reconciler",
                                         note="checkout is between steps; reconcile_checkouts resumes or unwinds"),
        S.PAYMENT_PENDING: WaitPolicy(timer_event="payment_timed_out",
                                      after_seconds=conf.get("ORDERS_PAYMENT_TIMEOUT_SECONDS"), owner="provider",
                                      note="no provider outcome in time: cancel, promising a void"),
        S.PAYMENT_FAILED: WaitPolicy(timer_event="payment_retry_window_elapsed",
                                     after_seconds=conf.get("ORDERS_PAYMENT_RETRY_WINDOW_SECONDS"), owner="buyer",
                                     note="the buyer may start a new attempt; then the order is cancelled"),
        S.PAID: WaitPolicy(escalate_after_seconds=24 * 3600, owner="warehouse",
                           note="handed off to the warehouse; waiting for fulfillment_accepted"),
        S.FULFILLMENT_PENDING: WaitPolicy(escalate_after_seconds=72 * 3600, owner="warehouse",
                                          note="being picked and packed; waiting for shipped"),
        S.SHIPPED: WaitPolicy(escalate_after_seconds=21 * 24 * 3600, owner="carrier",
                              note="in transit; waiting for delivery_confirmed"),
        S.CANCELLATION_PENDING: WaitPolicy(timer_event="cancellation_timed_out",
                                           after_seconds=conf.get("ORDERS_CANCELLATION_QUERY_SECONDS"),
                                           owner="provider",
                                           note="void promised; on timeout the provider is asked what happened"),
        S.REFUND_PENDING: WaitPolicy(timer_event="refund_overdue",
                                     after_seconds=conf.get("ORDERS_REFUND_TARGET_SECONDS"), owner="provider",
                                     note="refund promised; past the service target operators are flagged"),
        S.MANUAL_REVIEW: WaitPolicy(escalate_after_seconds=0, owner="operators",
                                    note="evidence conflicts or policy asks for a human: resolve with a reason"),
    }

    state = FSMField(default=S.INVENTORY_RESERVED, choices=State.choices, protected=True)
    cart_id = models.BigIntegerField(null=True, blank=True)
    checkout_key = models.CharField(max_length=255, unique=True, null=True, blank=True)
    currency = models.CharField(max_length=3)
    total_amount = models.PositiveBigIntegerField()
    lines = models.JSONField(default=list, blank=True)
    # the current payment attempt (owned by payments; the order only points at it)
    current_attempt_id = models.BigIntegerField(null=True, blank=True)
    current_attempt_ref = models.CharField(max_length=64, blank=True, default="")
    current_provider_ref = models.CharField(max_length=255, blank=True, default="")
    attempt_count = models.PositiveIntegerField(default=0)
    # payment facts the order has accepted
    capture_ref = models.CharField(max_length=255, blank=True, default="")
    captured_amount = models.BigIntegerField(null=True, blank=True)
    captured_attempt_ref = models.CharField(max_length=64, blank=True, default="")
    # cancellation and refund
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancellation_queries = models.PositiveIntegerField(default=0)
    refund_key = models.CharField(max_length=255, blank=True, default="")
    refund_round = models.PositiveIntegerField(default=0)
    refund_ref = models.CharField(max_length=255, blank=True, default="")
    refunded_amount = models.BigIntegerField(null=True, blank=True)
    inventory_release_promised_at = models.DateTimeField(null=True, blank=True)
    # what operators must look at
    review_reason = models.TextField(blank=True, default="")
    attention = models.TextField(blank=True, default="")
    failure_report = models.JSONField(null=True, blank=True)
    # fulfillment
    tracking_ref = models.CharField(max_length=255, blank=True, default="")
    history = HistoricalRecords(bases=[ActorHistory])

    class Meta:
        indexes = [models.Index(fields=["state", "entered_state_at"], name="order_state_age")]
        constraints = [models.CheckConstraint(condition=Q(total_amount__gt=0), name="order_total_positive")]

    def __str__(self) -> str:
        return f"order#{self.pk} [{self.state}]"

    # --- promises shared by several rules ------------------------------------------------------
    def _promise_void(self, ctx) -> None:
        ctx.emit("orders.request_void", key=void_key(self.current_attempt_ref),
                 payload={"order_id": self.pk, "attempt_ref": self.current_attempt_ref,
                          "attempt_id": self.current_attempt_id})

    def _promise_release(self, ctx) -> None:
        if self.inventory_release_promised_at is None:
            self.inventory_release_promised_at = ctx.now
        ctx.emit("orders.release_inventory", key=release_key(self.pk), payload={"order_id": self.pk})

    def _promise_refund(self, ctx) -> None:
        self.refund_round += 1
        self.refund_key = refund_key_for(self.capture_ref, self.refund_round)
        ctx.emit("orders.request_refund", key=self.refund_key,
                 payload={"order_id": self.pk, "refund_key": self.refund_key, "capture_ref": self.capture_ref,
                          "attempt_ref": self.captured_attempt_ref, "attempt_id": self.current_attempt_id,
                          "amount": self.captured_amount, "currency": self.currency})
        # Inventory may stay reserved during refund_pending only for a while (see docs): its own timer.
        ctx.schedule("inventory_hold_elapsed",
                     at=ctx.now + timedelta(seconds=conf.get("ORDERS_REFUND_INVENTORY_HOLD_SECONDS")))

    def _record_capture(self, ctx) -> None:
        self.capture_ref = str(ctx.payload.get("capture_ref") or ctx.payload.get("attempt_ref", ""))
        self.captured_amount = _int(ctx.payload.get("amount"))
        self.captured_attempt_ref = str(ctx.payload.get("attempt_ref", ""))

    def _promise_paid_work(self, ctx) -> None:
        ctx.emit("orders.commit_inventory", key=f"order:{self.pk}:commit-inventory", payload={"order_id": self.pk})
        ctx.emit("orders.warehouse_handoff", key=f"order:{self.pk}:warehouse-handoff",
                 payload={"order_id": self.pk, "lines": self.lines})

    # --- payment ---------------------------------------------------------------------------------
    @transition(field=state, source=[S.INVENTORY_RESERVED, S.PAYMENT_FAILED], target=S.PAYMENT_PENDING,
                conditions=[attempt_amount_matches])
    def payment_started(self, ctx):
        self.current_attempt_ref = str(ctx.payload["attempt_ref"])
        self.current_attempt_id = _int(ctx.payload.get("attempt_id"))
        self.current_provider_ref = str(ctx.payload.get("provider_ref", ""))
        self.attempt_count += 1

    @transition(field=state, source=S.PAYMENT_PENDING, target=S.PAID,
                conditions=[attempt_is_current, capture_amount_matches])
    @transition(field=state, source=S.CANCELLATION_PENDING, target=RETURN_VALUE(S.REFUND_PENDING, S.MANUAL_REVIEW),
                conditions=[attempt_is_current, capture_amount_matches])
    @transition(field=state, source=S.PAYMENT_FAILED, target=S.MANUAL_REVIEW, conditions=[attempt_is_current])
    @transition(field=state, source=S.CANCELLED, target=S.MANUAL_REVIEW,
                conditions=[attempt_is_current, capture_not_recorded])
    def payment_captured(self, ctx):
        source = self.state
        self._record_capture(ctx)
        if source == self.S.PAYMENT_PENDING:
            self._promise_paid_work(ctx)
            return self.S.PAID
        if source == self.S.CANCELLATION_PENDING:
            policy = conf.get("ORDERS_CAPTURE_DURING_CANCELLATION")
            high_value = self.captured_amount >= conf.get("ORDERS_HIGH_VALUE_MINOR_UNITS")
            if policy == "manual_review" or high_value:
                why = ("capture of a high-value order during cancellation" if high_value
                       else "capture during cancellation; policy routes it to review")
                self.review_reason = why
                ctx.needs_review(why)
                return self.S.MANUAL_REVIEW
            self._promise_refund(ctx)
            return self.S.REFUND_PENDING
        # A capture after the attempt was reported failed, or on an order already cancelled: money was
        # taken where none was expected. Evidence conflicts; a human decides (usually: refund).
        self.review_reason = f"capture of {self.captured_attempt_ref} while the order was {source}"
        ctx.needs_review(self.review_reason)
        return self.S.MANUAL_REVIEW

    @transition(field=state, source=S.PAYMENT_PENDING, target=S.PAYMENT_FAILED, conditions=[attempt_is_current])
    @transition(field=state, source=S.CANCELLATION_PENDING, target=S.CANCELLED, conditions=[attempt_is_current])
    def payment_failed(self, ctx):
        if self.state == self.S.CANCELLATION_PENDING:
            self._promise_release(ctx)

    @transition(field=state, source=S.PAYMENT_PENDING, target=S.PAYMENT_FAILED, conditions=[attempt_is_current])
    @transition(field=state, source=S.CANCELLATION_PENDING, target=S.CANCELLED, conditions=[attempt_is_current])
    def payment_voided(self, ctx):
        if self.state == self.S.CANCELLATION_PENDING:
            self._promise_release(ctx)

    @transition(field=state, source=S.PAYMENT_PENDING, target=S.CANCELLATION_PENDING)
    def payment_timed_out(self, ctx):
        self.cancel_requested_at = ctx.now
        self._promise_void(ctx)

    @transition(field=state, source=S.PAYMENT_FAILED, target=S.CANCELLED)
    def payment_retry_window_elapsed(self, ctx):
        self._promise_release(ctx)

    # --- cancellation ----------------------------------------------------------------------------
    @transition(field=state, source=[S.INVENTORY_RESERVED, S.PAYMENT_FAILED], target=S.CANCELLED)
    @transition(field=state, source=S.PAYMENT_PENDING, target=S.CANCELLATION_PENDING)
    @transition(field=state, source=S.PAID, target=S.REFUND_PENDING)
    def cancel(self, ctx):
        self.cancel_requested_at = ctx.now
        if self.state == self.S.PAYMENT_PENDING:
            # The outcome is unknown: not cancelled yet. A void is promised; a capture may still win.
            self._promise_void(ctx)
        elif self.state == self.S.PAID:
            self._promise_refund(ctx)
        else:
            self._promise_release(ctx)

    @transition(field=state, source=S.CANCELLATION_PENDING,
                target=RETURN_VALUE(S.CANCELLATION_PENDING, S.MANUAL_REVIEW))
    def cancellation_timed_out(self, ctx):
        """Ask the provider what happened to the attempt; the answer arrives as a payment fact."""
        self.cancellation_queries += 1
        if self.cancellation_queries > conf.get("ORDERS_CANCELLATION_MAX_QUERIES"):
            self.review_reason = f"provider gave no final outcome after {self.cancellation_queries - 1} queries"
            return self.S.MANUAL_REVIEW
        ctx.emit("orders.resolve_cancellation", key=f"order:{self.pk}:cancellation-query:{self.cancellation_queries}",
                 payload={"order_id": self.pk, "attempt_ref": self.current_attempt_ref,
                          "attempt_id": self.current_attempt_id})
        delay = conf.get("ORDERS_CANCELLATION_QUERY_SECONDS") * (2 ** self.cancellation_queries)
        ctx.schedule("cancellation_timed_out", at=ctx.now + timedelta(seconds=delay))
        return self.S.CANCELLATION_PENDING

    @transition(field=state, source=[S.INVENTORY_RESERVED, S.PAYMENT_FAILED], target=S.CANCELLED)
    @transition(field=state, source=S.PAYMENT_PENDING, target=S.CANCELLATION_PENDING)
    def reservation_expired(self, ctx):
        """The stock hold lapsed before the order was paid: the order cannot be honoured as placed."""
        self.cancel_requested_at = ctx.now
        if self.state == self.S.PAYMENT_PENDING:
            self._promise_void(ctx)
        else:
            self._promise_release(ctx)

    # --- refund ----------------------------------------------------------------------------------
    @transition(field=state, source=S.REFUND_PENDING, target=S.CANCELLED,
                conditions=[refund_is_current, refund_amount_matches])
    def refund_succeeded(self, ctx):
        self.refund_ref = str(ctx.payload.get("refund_ref", ""))
        self.refunded_amount = _int(ctx.payload.get("amount"))
        self._promise_release(ctx)

    @transition(field=state, source=S.REFUND_PENDING, target=S.REFUND_PENDING, conditions=[refund_is_current])
    def refund_failed(self, ctx):
        """The buyer is still owed the money: the order keeps waiting and operators are flagged to retry
        the refund (payments' refund retry, with actor and reason); its success then cancels the order."""
        self.attention = f"refund {self.refund_key} failed: {ctx.payload.get('error', 'no reason given')}; retry it"

    @transition(field=state, source=S.REFUND_PENDING, target=S.REFUND_PENDING)
    def refund_overdue(self, ctx):
        self.attention = "refund service target missed: check the refund and its outbox item"

    @transition(field=state, source=S.REFUND_PENDING, target=S.REFUND_PENDING)
    def inventory_hold_elapsed(self, ctx):
        """The 15-minute policy: stock goes back on the shelf although the refund is unresolved."""
        self._promise_release(ctx)

    # --- fulfillment (warehouse events) ------------------------------------------------------------
    @transition(field=state, source=S.PAID, target=S.FULFILLMENT_PENDING)
    def fulfillment_accepted(self, ctx):
        pass

    @transition(field=state, source=S.FULFILLMENT_PENDING, target=S.SHIPPED)
    def shipped(self, ctx):
        self.tracking_ref = str(ctx.payload.get("tracking_ref", ""))[:255]
        ctx.emit("orders.fulfill_inventory", key=f"order:{self.pk}:fulfill-inventory", payload={"order_id": self.pk})

    @transition(field=state, source=S.SHIPPED, target=S.DELIVERED)
    def delivery_confirmed(self, ctx):
        pass

    # --- checkout unwinding ----------------------------------------------------------------------
    @transition(field=state, source=[S.INVENTORY_RESERVED, S.PAYMENT_PENDING], target=S.CHECKOUT_FAILED)
    def checkout_unwound(self, ctx):
        """The checkout saga (or the reconciler) compensates: void what was started, release the stock."""
        self.failure_report = ctx.payload.get("report")
        if self.current_attempt_ref:
            self._promise_void(ctx)
        self._promise_release(ctx)

    # --- review ----------------------------------------------------------------------------------
    @transition(field=state, source=[S.PAYMENT_PENDING, S.CANCELLATION_PENDING, S.REFUND_PENDING],
                target=S.MANUAL_REVIEW)
    def route_to_review(self, ctx):
        self.review_reason = ctx.detail or "routed to review"
        if ctx.event_type == "payment_captured" and ctx.payload.get("attempt_ref") == self.current_attempt_ref:
            self._record_capture(ctx)  # keep the evidence on the order for the operator

    @transition(field=state, source=S.MANUAL_REVIEW,
                target=RETURN_VALUE(S.REFUND_PENDING, S.PAID, S.CANCELLED), custom={"repair": True})
    def resolve(self, ctx):
        """Operator decision: ``refund`` the capture, ``accept`` it (continue to fulfillment), or ``cancel``."""
        decision = ctx.payload.get("decision")
        if decision == "refund":
            if not self.capture_ref:
                raise ctx.reject("illegal", "nothing to refund: no capture recorded")
            self._promise_refund(ctx)
            return self.S.REFUND_PENDING
        if decision == "accept":
            if not self.capture_ref or self.cancel_requested_at is not None:
                raise ctx.reject("illegal", "accept needs a capture and no cancellation request")
            self._promise_paid_work(ctx)
            return self.S.PAID
        if decision == "cancel":
            if self.capture_ref and self.refunded_amount is None:
                raise ctx.reject("illegal", "money was captured and not refunded: decide 'refund' instead")
            self._promise_release(ctx)
            return self.S.CANCELLED
        raise ctx.reject("illegal", "decision must be one of refund, accept, cancel")

"""Payments: the payment attempt and refund machines, the provider-event inbox, reconciliation records.

A payment attempt owns one provider PaymentIntent: its request identity (``public_id``, sent as
metadata and inside every idempotency key) and the outcomes the provider reported. A refund is its own
machine with a stable key derived from the capture it refunds. Provider facts arrive as events whose
identity is ``<provider object id>:<provider status>``, whichever road brought them (an effect's
response, a webhook, a query, reconciliation), so the same fact is applied once and replays answer
``already_applied``.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django_fsm import RETURN_VALUE, FSMField, transition
from simple_history.models import HistoricalRecords

from workflow.history import ActorHistory
from workflow.machine import StateMachine, WaitPolicy, guard

# Outbox effect types owned by payments (handlers in payments/effects.py).
EFFECT_CREATE_INTENT = "payments.create_intent"
EFFECT_CAPTURE_INTENT = "payments.capture_intent"
EFFECT_CANCEL_INTENT = "payments.cancel_intent"
EFFECT_QUERY_ATTEMPT = "payments.query_attempt"
EFFECT_CREATE_REFUND = "payments.create_refund"
EFFECT_QUERY_REFUND = "payments.query_refund"

# An unknown outcome is queried after a short pause (the provider may still be working on the call).
QUERY_DELAY = timedelta(seconds=5)
LATE_EVIDENCE = {"late_evidence": True}  # a rule that only classifies older provider news as ``stale``


# --- guards ---------------------------------------------------------------------------------------
@guard(result="stale", detail="the payment attempt is no longer current (superseded by a newer attempt)")
def attempt_is_current(attempt: PaymentAttempt, ctx) -> bool:
    return attempt.is_current


@guard(result="needs_review", detail="the provider's amount or currency differs from the attempt's")
def attempt_amount_matches(attempt: PaymentAttempt, ctx) -> bool:
    return (
        int(ctx.payload.get("amount", -1)) == attempt.amount
        and str(ctx.payload.get("currency", "")).lower() == attempt.currency
    )


@guard(result="needs_review", detail="the event names a different provider intent than the attempt holds")
def attempt_intent_matches(attempt: PaymentAttempt, ctx) -> bool:
    reported = ctx.payload.get("intent_id") or ""
    return not attempt.provider_intent_id or not reported or reported == attempt.provider_intent_id


@guard(result="needs_review", detail="the provider's refund amount or currency differs from the refund's")
def refund_amount_matches(refund: Refund, ctx) -> bool:
    return (
        int(ctx.payload.get("amount", -1)) == refund.amount
        and str(ctx.payload.get("currency", "")).lower() == refund.currency
    )


@guard(result="needs_review", detail="the event names a different provider refund than the refund holds")
def refund_object_matches(refund: Refund, ctx) -> bool:
    reported = ctx.payload.get("refund_id") or ""
    return not refund.provider_refund_id or not reported or reported == refund.provider_refund_id


# --- payment attempt -----------------------------------------------------------------------------
class PaymentAttempt(StateMachine):
    """One try at taking a payment for an owner (an order), through one provider PaymentIntent."""

    class State(models.TextChoices):
        REQUESTED = "requested"  # create+authorize promised to the provider
        AUTHORIZED = "authorized"  # provider holds the funds (requires_capture)
        CAPTURE_PENDING = "capture_pending"  # capture promised
        VOID_PENDING = "void_pending"  # void (cancel) promised
        UNKNOWN = "unknown"  # a call's outcome was not confirmed; a provider query is promised
        CAPTURED = "captured"
        VOIDED = "voided"
        FAILED = "failed"  # declined, or refused by the provider
        MANUAL_REVIEW = "manual_review"  # evidence conflicts with local expectation

    MACHINE_NAME = "payment_attempt"
    TERMINAL_STATES = frozenset({State.CAPTURED, State.VOIDED, State.FAILED})
    WAIT_POLICIES = {
        State.REQUESTED: WaitPolicy(
            escalate_after_seconds=900,
            owner="payments",
            note="the create effect (or its webhook) answers; stuck means provider trouble",
        ),
        State.AUTHORIZED: WaitPolicy(
            escalate_after_seconds=6 * 86400,
            owner="orders",
            note="an authorization expires after 7 days at Stripe: capture or void it",
        ),
        State.CAPTURE_PENDING: WaitPolicy(escalate_after_seconds=900, owner="payments"),
        State.VOID_PENDING: WaitPolicy(escalate_after_seconds=900, owner="payments"),
        State.UNKNOWN: WaitPolicy(
            escalate_after_seconds=1800,
            owner="payments",
            note="a provider query is promised; still unknown after 30 minutes: operators",
        ),
        State.MANUAL_REVIEW: WaitPolicy(escalate_after_seconds=0, owner="operators"),
    }
    REVIEW_EVENT = "route_to_review"

    state = FSMField(default=State.REQUESTED, choices=State.choices, protected=True)
    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    owner_type = models.CharField(max_length=64, help_text="e.g. orders.order")
    owner_id = models.CharField(max_length=64)
    sequence = models.PositiveIntegerField(default=1)
    is_current = models.BooleanField(default=True)
    amount = models.PositiveBigIntegerField(help_text="minor units (cents)")
    currency = models.CharField(max_length=3)
    payment_method = models.CharField(max_length=100, blank=True, default="")
    provider = models.CharField(max_length=32, default="stripe")
    provider_intent_id = models.CharField(max_length=255, blank=True, default="")
    provider_status = models.CharField(max_length=32, blank=True, default="")
    pending_operation = models.CharField(
        max_length=16, blank=True, default="", help_text="create|capture|void whose outcome is unknown"
    )
    captured_amount = models.PositiveBigIntegerField(null=True, blank=True)
    decline_code = models.CharField(max_length=64, blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    history = HistoricalRecords(bases=[ActorHistory])

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["owner_type", "owner_id", "sequence"], name="payment_attempt_sequence"
            ),
            models.UniqueConstraint(
                fields=["provider_intent_id"],
                condition=~Q(provider_intent_id=""),
                name="payment_attempt_intent_once",
            ),
        ]
        indexes = [models.Index(fields=["state", "entered_state_at"], name="payment_attempt_state_age")]

    def __str__(self) -> str:
        return f"attempt {self.pk} ({self.owner_type}:{self.owner_id} #{self.sequence}) {self.state}"

    # Stable effect keys: every provider call's idempotency key is derived from one of these.
    def effect_key(self, operation: str) -> str:
        return f"payatt:{self.public_id}:{operation}"

    def _observe(self, ctx) -> None:
        if ctx.payload.get("intent_id"):
            self.provider_intent_id = ctx.payload["intent_id"]
        if ctx.payload.get("status"):
            self.provider_status = ctx.payload["status"]

    def _call_payload(self, operation: str) -> dict:
        return {"attempt_id": self.pk, "operation": operation, "idempotency_key": self.effect_key(operation)}

    # --- provider facts -------------------------------------------------------------------------
    @transition(
        field=state,
        source=[State.REQUESTED, State.UNKNOWN, State.VOID_PENDING],
        target=RETURN_VALUE(State.AUTHORIZED, State.VOID_PENDING),
        conditions=[attempt_is_current, attempt_intent_matches, attempt_amount_matches],
    )
    @transition(field=state, source=[State.CAPTURED, State.VOIDED], target=None, custom=LATE_EVIDENCE)
    def authorized(self, ctx):
        """The provider holds the funds (PaymentIntent ``requires_capture``)."""
        if self.state in (self.State.CAPTURED, self.State.VOIDED):
            raise ctx.reject("stale", f"authorization reported after the attempt was {self.state}")
        self._observe(ctx)
        if self.state == self.State.VOID_PENDING:
            return self.State.VOID_PENDING
        self.pending_operation = ""
        return self.State.AUTHORIZED

    @transition(
        field=state,
        source=State.UNKNOWN,
        target=RETURN_VALUE(State.AUTHORIZED, State.CAPTURE_PENDING, State.VOID_PENDING),
        conditions=[attempt_intent_matches, attempt_amount_matches],
    )
    def not_performed(self, ctx):
        """A query shows the unknown capture/void did not happen (the intent is still authorized).

        It is promised again under the SAME provider key: if the first call lands late after all, the
        provider replays it instead of acting twice.
        """
        self._observe(ctx)
        operation, self.pending_operation = self.pending_operation, ""
        if operation not in ("capture", "void"):
            return self.State.AUTHORIZED
        effect = EFFECT_CAPTURE_INTENT if operation == "capture" else EFFECT_CANCEL_INTENT
        ctx.emit(
            effect,
            key=f"{self.effect_key(operation)}:after-v{self.state_version}",
            payload=self._call_payload(operation),
        )
        return self.State.CAPTURE_PENDING if operation == "capture" else self.State.VOID_PENDING

    @transition(
        field=state,
        source=[State.REQUESTED, State.AUTHORIZED, State.CAPTURE_PENDING, State.VOID_PENDING, State.UNKNOWN],
        target=State.CAPTURED,
        conditions=[attempt_is_current, attempt_intent_matches, attempt_amount_matches],
    )
    @transition(field=state, source=State.FAILED, target=None, custom=LATE_EVIDENCE)
    def captured(self, ctx):
        """The provider captured the funds (PaymentIntent ``succeeded``)."""
        if self.state == self.State.FAILED:
            # A declined intent can still be confirmed later (the buyer's old tab): money taken on an
            # attempt that gave up. Not ours to undo here: stale, published to the owner (who decides
            # against its own current attempt) and left for reconciliation to refund.
            raise ctx.reject("stale", "a capture reported after the attempt had failed")
        self._observe(ctx)
        self.captured_amount = int(ctx.payload["amount"])
        self.pending_operation = ""

    @transition(
        field=state,
        source=[State.REQUESTED, State.AUTHORIZED, State.CAPTURE_PENDING, State.VOID_PENDING, State.UNKNOWN],
        target=State.VOIDED,
        conditions=[attempt_intent_matches],
    )
    def voided(self, ctx):
        """The provider cancelled the intent; no money moves (PaymentIntent ``canceled``)."""
        self._observe(ctx)
        self.pending_operation = ""

    @transition(
        field=state,
        source=[State.REQUESTED, State.UNKNOWN],
        target=State.FAILED,
        conditions=[attempt_intent_matches],
    )
    @transition(
        field=state,
        source=[State.AUTHORIZED, State.CAPTURE_PENDING, State.CAPTURED, State.VOIDED],
        target=None,
        custom=LATE_EVIDENCE,
    )
    def failed(self, ctx):
        """Declined, or refused by the provider (PaymentIntent back to ``requires_payment_method``)."""
        if self.state not in (self.State.REQUESTED, self.State.UNKNOWN):
            raise ctx.reject("stale", f"a failure reported after the attempt was {self.state}")
        self._observe(ctx)
        self.decline_code = str(ctx.payload.get("decline_code") or "")[:64]
        self.last_error = str(ctx.payload.get("error") or "")
        self.pending_operation = ""

    @transition(
        field=state, source=[State.REQUESTED, State.CAPTURE_PENDING, State.VOID_PENDING], target=State.UNKNOWN
    )
    def outcome_unknown(self, ctx):
        """A provider call timed out or lost its answer: ask the provider, never resend blindly."""
        self.pending_operation = ctx.payload["operation"]
        self.last_error = str(ctx.payload.get("error") or "")
        ctx.emit(
            EFFECT_QUERY_ATTEMPT,
            key=f"{self.effect_key('query')}:v{self.state_version}",
            payload={"attempt_id": self.pk, "operation": self.pending_operation},
            not_before=ctx.now + QUERY_DELAY,
        )

    # --- commands -------------------------------------------------------------------------------
    @transition(field=state, source=State.AUTHORIZED, target=State.CAPTURE_PENDING)
    def capture(self, ctx):
        ctx.emit(EFFECT_CAPTURE_INTENT, key=self.effect_key("capture"), payload=self._call_payload("capture"))

    @transition(
        field=state, source=[State.REQUESTED, State.AUTHORIZED, State.UNKNOWN], target=State.VOID_PENDING
    )
    def void(self, ctx):
        ctx.emit(EFFECT_CANCEL_INTENT, key=self.effect_key("void"), payload=self._call_payload("void"))

    @transition(
        field=state,
        source=[State.REQUESTED, State.AUTHORIZED, State.UNKNOWN, State.VOID_PENDING],
        target=State.VOID_PENDING,
    )
    def abandon(self, ctx):
        """A newer attempt replaces this one: it stops being current and its authorization is voided."""
        self.is_current = False
        ctx.emit(EFFECT_CANCEL_INTENT, key=self.effect_key("void"), payload=self._call_payload("void"))

    # --- review and repairs ---------------------------------------------------------------------
    @transition(
        field=state,
        source=[State.REQUESTED, State.AUTHORIZED, State.CAPTURE_PENDING, State.VOID_PENDING, State.UNKNOWN],
        target=State.MANUAL_REVIEW,
    )
    def route_to_review(self, ctx):
        """Evidence conflicts (amount, currency, intent): an operator looks before anything moves."""

    @transition(
        field=state,
        source=State.MANUAL_REVIEW,
        target=RETURN_VALUE(State.AUTHORIZED, State.CAPTURED, State.VOIDED, State.FAILED),
        custom={"repair": True},
    )
    def resolve(self, ctx):
        """An operator states what the provider really holds, after looking."""
        decision = ctx.payload.get("decision")
        targets = {
            "authorized": self.State.AUTHORIZED,
            "captured": self.State.CAPTURED,
            "voided": self.State.VOIDED,
            "failed": self.State.FAILED,
        }
        if decision not in targets:
            raise ctx.reject("illegal", f"decision must be one of {sorted(targets)}")
        if decision == "captured":
            self.captured_amount = int(ctx.payload.get("amount", self.amount))
        return targets[decision]

    @transition(
        field=state,
        source=[State.REQUESTED, State.AUTHORIZED, State.CAPTURE_PENDING, State.VOID_PENDING, State.UNKNOWN,
                State.FAILED],
        target=State.CAPTURED,
        custom={"repair": True},
    )
    def record_superseded_capture(self, ctx):
        """Reconciliation repair: the provider captured an attempt we had abandoned (refunded separately)."""
        self._observe(ctx)
        self.captured_amount = int(ctx.payload.get("amount", self.amount))
        self.pending_operation = ""


# --- refund --------------------------------------------------------------------------------------
class Refund(StateMachine):
    """Money going back for one captured attempt. ``refund_key`` is derived from the capture it refunds."""

    class State(models.TextChoices):
        REQUESTED = "requested"  # refund promised to the provider
        PENDING = "pending"  # the provider accepted it; the final answer comes later
        UNKNOWN = "unknown"  # the call's outcome was not confirmed; a provider query is promised
        SUCCEEDED = "succeeded"
        FAILED = "failed"  # the provider refused or failed it; an operator may retry
        MANUAL_REVIEW = "manual_review"

    MACHINE_NAME = "refund"
    TERMINAL_STATES = frozenset({State.SUCCEEDED})
    WAIT_POLICIES = {
        State.REQUESTED: WaitPolicy(escalate_after_seconds=900, owner="payments"),
        State.PENDING: WaitPolicy(
            escalate_after_seconds=5 * 86400,
            owner="provider",
            note="card refunds settle within days; the webhook or reconciliation closes it",
        ),
        State.UNKNOWN: WaitPolicy(escalate_after_seconds=1800, owner="payments"),
        State.FAILED: WaitPolicy(
            escalate_after_seconds=0,
            owner="operators",
            note="automatic retries exhausted: an operator retries it with a reason",
        ),
        State.MANUAL_REVIEW: WaitPolicy(escalate_after_seconds=0, owner="operators"),
    }
    REVIEW_EVENT = "route_to_review"

    state = FSMField(default=State.REQUESTED, choices=State.choices, protected=True)
    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    attempt = models.ForeignKey(PaymentAttempt, on_delete=models.PROTECT, related_name="refunds")
    refund_key = models.CharField(max_length=200, unique=True)
    amount = models.PositiveBigIntegerField()
    currency = models.CharField(max_length=3)
    note = models.CharField(max_length=200, blank=True, default="", help_text="why the money goes back")
    tries = models.PositiveIntegerField(default=1)
    provider_refund_id = models.CharField(max_length=255, blank=True, default="")
    provider_status = models.CharField(max_length=32, blank=True, default="")
    failure_reason = models.TextField(blank=True, default="")
    history = HistoricalRecords(bases=[ActorHistory])

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["provider_refund_id"],
                condition=~Q(provider_refund_id=""),
                name="refund_provider_object_once",
            ),
        ]
        indexes = [models.Index(fields=["state", "entered_state_at"], name="refund_state_age")]

    def __str__(self) -> str:
        return f"refund {self.pk} ({self.refund_key}) {self.state}"

    def effect_key(self) -> str:
        """The provider idempotency key of the current try: a crash-and-retry reuses it, never a new one."""
        return f"refund:{self.refund_key}" if self.tries == 1 else f"refund:{self.refund_key}:try{self.tries}"

    def _call_payload(self) -> dict:
        return {"refund_id": self.pk, "try": self.tries, "idempotency_key": self.effect_key()}

    def _observe(self, ctx) -> None:
        if ctx.payload.get("refund_id"):
            self.provider_refund_id = ctx.payload["refund_id"]
        if ctx.payload.get("status"):
            self.provider_status = ctx.payload["status"]

    @transition(
        field=state,
        source=[State.REQUESTED, State.UNKNOWN],
        target=State.PENDING,
        conditions=[refund_object_matches, refund_amount_matches],
    )
    @transition(field=state, source=[State.SUCCEEDED, State.FAILED], target=None, custom=LATE_EVIDENCE)
    def pending(self, ctx):
        if self.state in (self.State.SUCCEEDED, self.State.FAILED):
            raise ctx.reject("stale", f"'pending' reported after the refund was {self.state}")
        self._observe(ctx)

    @transition(
        field=state,
        source=[State.REQUESTED, State.PENDING, State.UNKNOWN],
        target=State.SUCCEEDED,
        conditions=[refund_object_matches, refund_amount_matches],
    )
    def succeeded(self, ctx):
        self._observe(ctx)

    @transition(
        field=state,
        source=[State.REQUESTED, State.PENDING, State.UNKNOWN],
        target=State.FAILED,
        conditions=[refund_object_matches],
    )
    def failed(self, ctx):
        self._observe(ctx)
        self.failure_reason = str(ctx.payload.get("failure_reason") or ctx.payload.get("error") or "")

    @transition(field=state, source=State.REQUESTED, target=State.UNKNOWN)
    def outcome_unknown(self, ctx):
        self.failure_reason = str(ctx.payload.get("error") or "")
        ctx.emit(
            EFFECT_QUERY_REFUND,
            key=f"{self.effect_key()}:query:v{self.state_version}",
            payload=self._call_payload(),
            not_before=ctx.now + QUERY_DELAY,
        )

    @transition(field=state, source=State.FAILED, target=State.REQUESTED, custom={"repair": True})
    def retry(self, ctx):
        """Operator repair: try again under a new provider key (the failed refund moved no money)."""
        self.tries += 1
        self.provider_refund_id = ""
        self.provider_status = ""
        self.failure_reason = ""
        ctx.emit(EFFECT_CREATE_REFUND, key=self.effect_key(), payload=self._call_payload())

    @transition(
        field=state, source=[State.REQUESTED, State.PENDING, State.UNKNOWN], target=State.MANUAL_REVIEW
    )
    def route_to_review(self, ctx):
        pass

    @transition(
        field=state,
        source=State.MANUAL_REVIEW,
        target=RETURN_VALUE(State.SUCCEEDED, State.FAILED),
        custom={"repair": True},
    )
    def resolve(self, ctx):
        decision = ctx.payload.get("decision")
        if decision not in ("succeeded", "failed"):
            raise ctx.reject("illegal", "decision must be 'succeeded' or 'failed'")
        return self.State.SUCCEEDED if decision == "succeeded" else self.State.FAILED


# --- inbox ---------------------------------------------------------------------------------------
class ProviderEvent(models.Model):
    """A provider webhook event, stored verbatim under the provider's event id, with how it was classified."""

    provider = models.CharField(max_length=32)
    event_id = models.CharField(max_length=255)
    event_type = models.CharField(max_length=100)
    raw_body = models.TextField()
    payload = models.JSONField(default=dict)
    signature = models.TextField(blank=True, default="")
    received_at = models.DateTimeField(default=timezone.now)
    deliveries = models.PositiveIntegerField(default=1)
    last_delivery_at = models.DateTimeField(default=timezone.now)
    processed_at = models.DateTimeField(null=True, blank=True)
    result = models.CharField(max_length=32, blank=True, default="")
    detail = models.TextField(blank=True, default="")
    aggregate_type = models.CharField(max_length=64, blank=True, default="")
    aggregate_id = models.BigIntegerField(null=True, blank=True)
    transition_id = models.BigIntegerField(null=True, blank=True)
    answer = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["provider", "event_id"], name="provider_event_once")]
        indexes = [models.Index(fields=["aggregate_type", "aggregate_id"], name="provider_event_aggregate")]

    def __str__(self) -> str:
        return f"{self.provider} {self.event_id} {self.event_type} → {self.result or 'unprocessed'}"


# --- reconciliation ------------------------------------------------------------------------------
class Discrepancy(StateMachine):
    """A disagreement between local payment facts and the provider's, with a proposed bounded repair."""

    class State(models.TextChoices):
        OPEN = "open"
        REPAIRED = "repaired"
        DISMISSED = "dismissed"

    class Kind(models.TextChoices):
        CAPTURED_NOT_RECORDED = "captured_not_recorded"
        VOIDED_NOT_RECORDED = "voided_not_recorded"
        AUTHORIZED_NOT_RECORDED = "authorized_not_recorded"
        FAILED_NOT_RECORDED = "failed_not_recorded"
        CAPTURE_ON_ABANDONED_ATTEMPT = "capture_on_abandoned_attempt"
        LOCAL_STATE_NOT_AT_PROVIDER = "local_state_not_at_provider"
        AMOUNT_MISMATCH = "amount_mismatch"
        INTENT_MISSING = "intent_missing"
        UNKNOWN_INTENT = "unknown_intent"
        REFUND_SUCCEEDED_NOT_RECORDED = "refund_succeeded_not_recorded"
        REFUND_FAILED_NOT_RECORDED = "refund_failed_not_recorded"
        REFUND_MISSING_AT_PROVIDER = "refund_missing_at_provider"
        UNKNOWN_REFUND = "unknown_refund"

    class Repair(models.TextChoices):
        APPLY_PROVIDER_FACT = "apply_provider_fact", "apply the provider's fact to the local machine"
        REFUND_SUPERSEDED_CAPTURE = "refund_superseded_capture", "record the capture and refund it"
        REVIEW = "review", "route the local aggregate to manual review"

    MACHINE_NAME = "payment_discrepancy"
    TERMINAL_STATES = frozenset({State.REPAIRED, State.DISMISSED})
    WAIT_POLICIES = {State.OPEN: WaitPolicy(escalate_after_seconds=0, owner="operators")}

    state = FSMField(default=State.OPEN, choices=State.choices, protected=True)
    kind = models.CharField(max_length=64, choices=Kind.choices)
    fingerprint = models.CharField(max_length=255, unique=True)
    attempt = models.ForeignKey(
        PaymentAttempt, null=True, blank=True, on_delete=models.PROTECT, related_name="discrepancies"
    )
    refund = models.ForeignKey(
        Refund, null=True, blank=True, on_delete=models.PROTECT, related_name="discrepancies"
    )
    provider_object_id = models.CharField(max_length=255, blank=True, default="")
    local_state = models.CharField(max_length=32, blank=True, default="")
    provider_status = models.CharField(max_length=32, blank=True, default="")
    detail = models.TextField(blank=True, default="")
    proposed_repair = models.CharField(max_length=32, choices=Repair.choices)
    evidence = models.JSONField(default=dict, blank=True)
    last_seen_at = models.DateTimeField(default=timezone.now)
    history = HistoricalRecords(bases=[ActorHistory])

    class Meta:
        # The console's waiting list and dashboard: state filter, oldest first.
        indexes = [models.Index(fields=["state", "entered_state_at"], name="discrepancy_state_age")]

    def __str__(self) -> str:
        return f"discrepancy {self.pk} {self.kind} ({self.state})"

    @transition(field=state, source=State.OPEN, target=State.REPAIRED, custom={"repair": True})
    def repair(self, ctx):
        """The proposed repair was applied (through ``apply`` on the attempt/refund, same transaction)."""

    @transition(field=state, source=State.OPEN, target=State.DISMISSED, custom={"repair": True})
    def dismiss(self, ctx):
        """An operator judged it needs no repair."""

    @transition(field=state, source=State.OPEN, target=State.DISMISSED)
    def agreement_restored(self, ctx):
        """A later reconciliation run found local and provider facts agreeing again."""

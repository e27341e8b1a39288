"""The kernel's tables: transition history, outbox, timers, command idempotency claims, API keys.

Business aggregates (orders, payment attempts, print jobs, …) subclass ``StateMachine`` from
``workflow.machine``; the kernel in ``workflow.kernel`` is the only writer of their state and version.
"""

from __future__ import annotations

import hashlib
import secrets

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django_fsm import FSMField, transition

from .machine import StateMachine, WaitPolicy


class Result(models.TextChoices):
    """The six outcomes of ``apply`` (spec: "exactly these six")."""

    APPLIED = "applied"
    ALREADY_APPLIED = "already_applied"
    STALE = "stale"
    ILLEGAL = "illegal"
    CONFLICT = "conflict"
    NEEDS_REVIEW = "needs_review"


# Results that moved the aggregate (a ``needs_review`` routes it to review); the rest are rejections.
STATE_CHANGING_RESULTS = (Result.APPLIED, Result.NEEDS_REVIEW)


class Transition(models.Model):
    """Append-only record of every classified event (applied and rejected alike).

    UPDATE and DELETE are refused by a PostgreSQL trigger (migration 0002); replaying the
    state-changing rows per aggregate in ``to_version`` order rebuilds the aggregate's state.
    """

    aggregate_type = models.CharField(max_length=64)
    aggregate_id = models.BigIntegerField()
    event_type = models.CharField(max_length=64)
    event_identity = models.CharField(max_length=255)
    payload_hash = models.CharField(max_length=64)
    payload = models.JSONField(default=dict, blank=True)
    from_state = models.CharField(max_length=64)
    to_state = models.CharField(max_length=64)
    from_version = models.PositiveIntegerField()
    to_version = models.PositiveIntegerField()
    result = models.CharField(max_length=16, choices=Result.choices)
    detail = models.TextField(blank=True, default="")
    actor = models.CharField(max_length=150, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # One classified answer per identity and aggregate. Conflicting re-uses are recorded too,
            # as evidence, so they are left out of the uniqueness.
            models.UniqueConstraint(
                fields=["aggregate_type", "aggregate_id", "event_identity"],
                condition=~Q(result="conflict"),
                name="transition_identity_once",
            ),
        ]
        indexes = [
            models.Index(fields=["aggregate_type", "aggregate_id", "id"], name="transition_timeline"),
            models.Index(fields=["result", "created_at"], name="transition_result_time"),
        ]

    def __str__(self) -> str:
        return (f"{self.aggregate_type}#{self.aggregate_id} {self.event_type} "
                f"{self.from_state}->{self.to_state} ({self.result})")


class OutboxItem(StateMachine):
    """A durable promise of outside work, written in the same transaction as the transition that owes it.

    The effect key is unique and stable: handlers pass it (or a key derived from it) to the outside
    world as the idempotency key, so a redelivery cannot do the work twice.
    """

    class State(models.TextChoices):
        PENDING = "pending"
        RETRY_SCHEDULED = "retry_scheduled"
        DELIVERED = "delivered"
        DEAD = "dead"

    MACHINE_NAME = "outbox"
    TERMINAL_STATES = frozenset({State.DELIVERED})
    WAIT_POLICIES = {
        State.PENDING: WaitPolicy(escalate_after_seconds=300, owner="outbox worker",
                                  note="the sweep delivers it; older than 5 minutes means workers are behind"),
        State.RETRY_SCHEDULED: WaitPolicy(escalate_after_seconds=3600, owner="outbox worker",
                                          note="retried at next_attempt_at with backoff until max attempts"),
        State.DEAD: WaitPolicy(escalate_after_seconds=0, owner="operators",
                               note="automatic retries exhausted: an operator requeues it with a reason"),
    }

    state = FSMField(default=State.PENDING, choices=State.choices, protected=True)
    effect_type = models.CharField(max_length=64)
    effect_key = models.CharField(max_length=255, unique=True)
    aggregate_type = models.CharField(max_length=64, blank=True, default="")
    aggregate_id = models.BigIntegerField(null=True, blank=True)
    payload = models.JSONField(default=dict, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=8)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)

    class Meta:
        indexes = [
            # The sweep's claim: due items only (partial index stays small however many were delivered).
            models.Index(fields=["next_attempt_at", "id"], name="outbox_due",
                         condition=Q(state__in=["pending", "retry_scheduled"])),
            models.Index(fields=["aggregate_type", "aggregate_id"], name="outbox_aggregate"),
            models.Index(fields=["state", "entered_state_at"], name="outbox_state_age"),
        ]

    def __str__(self) -> str:
        return f"outbox#{self.pk} {self.effect_type} [{self.state}]"

    # --- transitions (applied by workflow.outbox through the kernel) ---------------------------
    @transition(field=state, source=[State.PENDING, State.RETRY_SCHEDULED], target=State.DELIVERED)
    def delivered(self, ctx):
        self.delivered_at = ctx.now
        self.attempts = ctx.payload["attempt"]
        self.result = ctx.payload.get("result")
        self.last_error = ""

    @transition(field=state, source=[State.PENDING, State.RETRY_SCHEDULED], target=State.RETRY_SCHEDULED)
    def attempt_failed(self, ctx):
        self.attempts = ctx.payload["attempt"]
        self.last_error = ctx.payload["error"][:4000]
        self.next_attempt_at = ctx.parse_time(ctx.payload["next_attempt_at"])

    @transition(field=state, source=[State.PENDING, State.RETRY_SCHEDULED], target=State.DEAD)
    def retries_exhausted(self, ctx):
        self.attempts = ctx.payload["attempt"]
        self.last_error = ctx.payload["error"][:4000]

    @transition(field=state, source=State.DEAD, target=State.PENDING, custom={"repair": True})
    def requeue(self, ctx):
        # A fresh budget of attempts (the effect type's own, unless the repair names one): not the
        # current max_attempts, which already counts earlier requeues and would double every time.
        from .outbox import effect_config

        fresh = int(ctx.payload.get("extra_attempts", 0) or 0) or effect_config(self.effect_type).max_attempts
        self.max_attempts = self.attempts + fresh
        self.next_attempt_at = ctx.now
        self.last_error = ""


class OutboxAttempt(models.Model):
    """One try at delivering an outbox item: when, how it ended, the error verbatim."""

    item = models.ForeignKey(OutboxItem, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    succeeded = models.BooleanField()
    retryable = models.BooleanField(default=True)
    error = models.TextField(blank=True, default="")
    worker = models.CharField(max_length=120, blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "number"], name="outbox_attempt_once")]

    def __str__(self) -> str:
        return f"attempt {self.number} of outbox#{self.item_id}"


class Timer(models.Model):
    """A durable clock event. Identity: (aggregate, timer type, scheduled_at).

    ``armed_state``/``armed_at`` say what it was set for: firing after the aggregate left that state is
    recorded as ``stale``, never taken as permission to act.
    """

    class Status(models.TextChoices):
        SCHEDULED = "scheduled"
        FIRED = "fired"

    aggregate_type = models.CharField(max_length=64)
    aggregate_id = models.BigIntegerField()
    timer_type = models.CharField(max_length=64)
    scheduled_at = models.DateTimeField()
    armed_state = models.CharField(max_length=64)
    armed_at = models.DateTimeField(default=timezone.now)
    payload = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.SCHEDULED)
    fired_at = models.DateTimeField(null=True, blank=True)
    result = models.CharField(max_length=16, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["aggregate_type", "aggregate_id", "timer_type", "scheduled_at"],
                                    name="timer_identity_once"),
        ]
        indexes = [
            models.Index(fields=["scheduled_at", "id"], name="timer_due", condition=Q(status="scheduled")),
            models.Index(fields=["aggregate_type", "aggregate_id"], name="timer_aggregate"),
        ]

    def __str__(self) -> str:
        return f"{self.timer_type} for {self.aggregate_type}#{self.aggregate_id} at {self.scheduled_at:%Y-%m-%d %H:%M}"

    @property
    def identity(self) -> str:
        return f"timer:{self.timer_type}:{self.scheduled_at.isoformat()}"


class IdempotencyClaim(models.Model):
    """An ``Idempotency-Key`` claim for a POST command, scoped to the caller."""

    class Status(models.TextChoices):
        IN_PROGRESS = "in_progress"
        COMPLETED = "completed"

    scope = models.CharField(max_length=128)
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IN_PROGRESS)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True)
    response_headers = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    locked_until = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "key"], name="idempotency_claim_once")]

    def __str__(self) -> str:
        return f"{self.key} ({self.status})"


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiKey(models.Model):
    """An integrator's key. Only a SHA-256 of the secret is stored; the key is shown once."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)

    KEY_PREFIX = "lf"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix})"

    @property
    def actor(self) -> str:
        return f"api_key:{self.name}"

    def has_scope(self, scope: str) -> bool:
        return "*" in self.scopes or scope in self.scopes

    @classmethod
    def split(cls, raw: str) -> tuple[str, str] | None:
        parts = raw.split("_", 2)
        if len(parts) != 3 or parts[0] != cls.KEY_PREFIX or not parts[1] or not parts[2]:
            return None
        return parts[1], parts[2]

    @classmethod
    def generate(cls) -> tuple[str, str, str]:
        prefix = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        return f"{cls.KEY_PREFIX}_{prefix}_{secret}", prefix, _hash_secret(secret)

    def matches(self, secret: str) -> bool:
        return secrets.compare_digest(self.secret_hash, _hash_secret(secret))

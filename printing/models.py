"""Print jobs, the stations that pull them, usage records and outbound webhook endpoints.

The print job machine is the seed's (print-job-states): nine states, each named after the
observation that produced it, and exactly its transition table::

    pending     → dispatching, canceled, expired
    dispatching → sent, pending, printing, completed, failed, unknown
    sent        → printing, completed, failed, unknown
    printing    → completed, failed, unknown
    unknown     → completed, failed          (terminal, yet a late acknowledgement may settle it)
    completed, failed, canceled, expired     → nothing

Rules are the methods below; the method name is the event type. Only ``workflow.kernel.apply``
moves a job.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.db import models
from django.db.models import Q
from django_fsm import RETURN_VALUE, FSMField, transition
from simple_history.models import HistoricalRecords

from workflow.history import ActorHistory
from workflow.machine import StateMachine, WaitPolicy, guard

from . import conf


class PrintJobState(models.TextChoices):
    PENDING = "pending"
    DISPATCHING = "dispatching"
    SENT = "sent"
    PRINTING = "printing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    EXPIRED = "expired"
    UNKNOWN = "unknown"


S = PrintJobState

# The seed's table, as data: the machine's rules must produce exactly these edges (a test checks).
SEED_TRANSITIONS: dict[str, tuple[str, ...]] = {
    S.PENDING: (S.DISPATCHING, S.CANCELED, S.EXPIRED),
    S.DISPATCHING: (S.SENT, S.PENDING, S.PRINTING, S.COMPLETED, S.FAILED, S.UNKNOWN),
    S.SENT: (S.PRINTING, S.COMPLETED, S.FAILED, S.UNKNOWN),
    S.PRINTING: (S.COMPLETED, S.FAILED, S.UNKNOWN),
    S.COMPLETED: (),
    S.FAILED: (),
    S.CANCELED: (),
    S.EXPIRED: (),
    S.UNKNOWN: (S.COMPLETED, S.FAILED),
}
TERMINAL = frozenset({S.COMPLETED, S.FAILED, S.CANCELED, S.EXPIRED, S.UNKNOWN})

# "Who observed what, what it proves, what it does not prove" — served by the API with every job.
STATE_MEANING: dict[str, dict[str, str]] = {
    S.PENDING: {"observed": "the API saved the job", "proves": "the instruction is durable",
                "does_not_prove": "anything about any device"},
    S.DISPATCHING: {"observed": "one server took a lease on the job for its station",
                    "proves": "exactly one lease holder is delivering it",
                    "does_not_prove": "that delivery will succeed"},
    S.SENT: {"observed": "the station confirmed it received the job under its lease",
             "proves": "the bytes left our side", "does_not_prove": "that the station processed it"},
    S.PRINTING: {"observed": "the station handed the job to the OS print system (os_job_id)",
                 "proves": "the OS accepted the work", "does_not_prove": "that a printer received it"},
    S.COMPLETED: {"observed": "the station's print command returned success through the OS print path",
                  "proves": "the local print path succeeded",
                  "does_not_prove": "that paper emerged, or is readable"},
    S.FAILED: {"observed": "something returned an error, with a reason (failure_reason, verbatim)",
               "proves": "this attempt did not succeed", "does_not_prove": "that nothing was printed"},
    S.CANCELED: {"observed": "a caller canceled while the job was still pending",
                 "proves": "no delivery was attempted",
                 "does_not_prove": "anything about a job already sent, which cannot be canceled"},
    S.EXPIRED: {"observed": "the deadline (expires_at) passed with no dispatch",
                "proves": "nobody was there to print it", "does_not_prove": "that the job was unwanted"},
    S.UNKNOWN: {"observed": "something was interrupted with an unconfirmed outcome",
                "proves": "only that we cannot say", "does_not_prove": "either outcome — inspect the printer "
                "before creating another job; a late station acknowledgement may still settle it"},
}


class ContentType(models.TextChoices):
    PDF = "pdf", "PDF"
    RAW_ZPL = "raw-zpl", "Raw / ZPL"
    TEXT = "text", "Plain text"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class Station(models.Model):
    """A program beside a printer. Authenticates with ``st_<prefix>_<secret>``; only the hash is kept."""

    TOKEN_PREFIX = "st"  # noqa: S105 - a label, not a secret

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField()
    last_seen_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat = models.JSONField(default=dict, blank=True)

    # DRF wants request.user to answer these.
    is_authenticated = True
    is_anonymous = False

    def __str__(self) -> str:
        return f"{self.name} (station {self.pk})"

    @property
    def actor(self) -> str:
        return f"station:{self.pk}:{self.name}"[:150]

    @classmethod
    def generate_token(cls) -> tuple[str, str, str]:
        prefix = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        return f"{cls.TOKEN_PREFIX}_{prefix}_{secret}", prefix, hash_secret(secret)

    @classmethod
    def split_token(cls, raw: str) -> tuple[str, str] | None:
        parts = raw.split("_", 2)
        if len(parts) != 3 or parts[0] != cls.TOKEN_PREFIX or not parts[1] or not parts[2]:
            return None
        return parts[1], parts[2]

    def matches(self, secret: str) -> bool:
        return secrets.compare_digest(self.secret_hash, hash_secret(secret))

    def connection_status(self, now) -> str:
        """connected / stale / disconnected, from the last time the station was heard from."""
        if self.last_seen_at is None:
            return "disconnected"
        silent = (now - self.last_seen_at).total_seconds()
        if silent <= conf.station_connected_seconds():
            return "connected"
        if silent <= conf.station_disconnected_seconds():
            return "stale"
        return "disconnected"


# --- guards --------------------------------------------------------------------------------------
@guard(result="stale", detail="the report names a lease that is not the job's current lease (fencing token)")
def lease_is_current(job: PrintJob, ctx) -> bool:
    return bool(job.lease_token) and ctx.payload.get("lease_token") == job.lease_token


@guard(result="stale", detail="the lease expired before the station reported; the job returns to pending")
def lease_not_expired(job: PrintJob, ctx) -> bool:
    # A lease only limits dispatching; once the station confirmed receipt the job is its own.
    if job.state != S.DISPATCHING:
        return True
    return job.lease_expires_at is not None and ctx.now <= job.lease_expires_at


@guard(result="illegal", detail="the job's expires_at has passed: it is not dispatched any more")
def not_past_deadline(job: PrintJob, ctx) -> bool:
    return ctx.now < job.expires_at


@guard(result="illegal", detail="only the job's own station may claim it")
def claimed_by_own_station(job: PrintJob, ctx) -> bool:
    return ctx.payload.get("station_id") == job.station_id


class PrintJob(StateMachine):
    State = PrintJobState

    MACHINE_NAME = "print_job"
    TERMINAL_STATES = TERMINAL
    WAIT_POLICIES = {
        # The kernel re-arms the same deadline on every return to pending (and fires at once if past).
        S.PENDING: WaitPolicy(timer_event="expire", deadline_field="expires_at", owner="station",
                              note="waits for its station to claim it; expires at expires_at"),
        S.DISPATCHING: WaitPolicy(timer_event="lease_expired", deadline_field="lease_expires_at", owner="station",
                                  note="the lease runs out unless the station confirms receipt; then pending again"),
        S.SENT: WaitPolicy(timer_event="silence_deadline_passed", deadline_field="report_deadline", owner="station",
                           note="the station must report printing or an outcome; silence ends in unknown"),
        S.PRINTING: WaitPolicy(timer_event="silence_deadline_passed", deadline_field="report_deadline",
                               owner="station", note="the OS has it; silence past the deadline ends in unknown"),
    }

    state = FSMField(default=S.PENDING, choices=S.choices, protected=True)
    station = models.ForeignKey(Station, on_delete=models.PROTECT, related_name="jobs")
    title = models.CharField(max_length=200, blank=True, default="")
    copies = models.PositiveSmallIntegerField(default=1)
    content_type = models.CharField(max_length=16, choices=ContentType.choices)
    content = models.BinaryField(null=True, blank=True)
    content_size = models.PositiveIntegerField(default=0)
    content_sha256 = models.CharField(max_length=64)
    content_purged_at = models.DateTimeField(null=True, blank=True)
    expires_in_seconds = models.PositiveIntegerField()
    expires_at = models.DateTimeField()
    business_object_type = models.CharField(max_length=64, blank=True, default="")
    business_object_id = models.CharField(max_length=128, blank=True, default="")
    submitted_by = models.CharField(max_length=150, blank=True, default="")
    # The lease: generation is the fencing token (monotonic per job); the token names one lease.
    lease_generation = models.PositiveIntegerField(default=0)
    lease_token = models.CharField(max_length=64, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    report_deadline = models.DateTimeField(null=True, blank=True)
    os_job_id = models.CharField(max_length=200, blank=True, default="")
    failure_reason = models.TextField(blank=True, default="")
    unknown_reason = models.TextField(blank=True, default="")
    settled_by = models.CharField(max_length=32, blank=True, default="")
    terminal_at = models.DateTimeField(null=True, blank=True)
    history = HistoricalRecords(bases=[ActorHistory], excluded_fields=["content"])

    class Meta:
        indexes = [
            # The claim: a station's oldest pending job.
            models.Index(fields=["station", "created_at", "id"], name="print_job_claimable",
                         condition=Q(state="pending")),
            # "Did it print?" by the business object the job came from.
            models.Index(fields=["business_object_id", "business_object_type"], name="print_job_business_object"),
            # The console's waiting list and dashboard: state filter, oldest first.
            models.Index(fields=["state", "entered_state_at"], name="print_job_state_age"),
            models.Index(fields=["terminal_at"], name="print_job_purge_due",
                         condition=Q(content_purged_at__isnull=True, terminal_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"print job {self.pk} [{self.state}]"

    # --- helpers used by the rules ---------------------------------------------------------------
    def _ended(self, ctx, target: str) -> None:
        if self.terminal_at is None:
            self.terminal_at = ctx.now
        self._announce(ctx, target)

    def _announce(self, ctx, target: str) -> None:
        """Promise a signed webhook to every endpoint subscribed to this state change (outbox)."""
        from .webhooks import announce_state_change

        announce_state_change(self, ctx, target)

    def _record_usage(self, ctx) -> None:
        UsageRecord.objects.get_or_create(job=self, defaults={
            "station_id": self.station_id, "copies": self.copies, "content_bytes": self.content_size,
            "recorded_at": ctx.now})

    def _station_facts(self, ctx) -> None:
        if ctx.payload.get("os_job_id"):
            self.os_job_id = str(ctx.payload["os_job_id"])[:200]

    # --- rules: pending --------------------------------------------------------------------------
    @transition(field=state, source=S.PENDING, target=S.DISPATCHING,
                conditions=[claimed_by_own_station, not_past_deadline])
    def claimed(self, ctx):
        self.lease_generation += 1
        self.lease_token = ctx.payload["lease_token"]
        self.lease_expires_at = ctx.now + timedelta(seconds=int(ctx.payload["lease_seconds"]))
        self._announce(ctx, S.DISPATCHING)

    @transition(field=state, source=S.PENDING, target=S.CANCELED)
    def cancel(self, ctx):
        self._ended(ctx, S.CANCELED)

    @transition(field=state, source=S.PENDING, target=S.EXPIRED)
    def expire(self, ctx):
        self._ended(ctx, S.EXPIRED)

    # --- rules: dispatching ----------------------------------------------------------------------
    @transition(field=state, source=S.DISPATCHING, target=S.PENDING)
    def lease_expired(self, ctx):
        self.lease_token = ""
        self.lease_expires_at = None
        self._announce(ctx, S.PENDING)

    @transition(field=state, source=S.DISPATCHING, target=S.SENT, conditions=[lease_is_current, lease_not_expired])
    def station_received(self, ctx):
        self.report_deadline = ctx.now + timedelta(seconds=conf.sent_silence_seconds())
        self._announce(ctx, S.SENT)

    @transition(field=state, source=[S.DISPATCHING, S.SENT], target=S.PRINTING,
                conditions=[lease_is_current, lease_not_expired])
    def station_printing(self, ctx):
        self._station_facts(ctx)
        self.report_deadline = ctx.now + timedelta(seconds=conf.printing_silence_seconds())
        self._announce(ctx, S.PRINTING)

    @transition(field=state, source=[S.DISPATCHING, S.SENT, S.PRINTING, S.UNKNOWN], target=S.COMPLETED,
                conditions=[lease_is_current, lease_not_expired])
    def station_completed(self, ctx):
        self._station_facts(ctx)
        self.settled_by = "station"
        self._record_usage(ctx)
        self._ended(ctx, S.COMPLETED)

    @transition(field=state, source=[S.DISPATCHING, S.SENT, S.PRINTING, S.UNKNOWN], target=S.FAILED,
                conditions=[lease_is_current, lease_not_expired])
    def station_failed(self, ctx):
        self._station_facts(ctx)
        self.failure_reason = str(ctx.payload.get("reason", ""))  # verbatim
        self.settled_by = "station"
        self._ended(ctx, S.FAILED)

    @transition(field=state, source=[S.DISPATCHING, S.SENT, S.PRINTING], target=S.UNKNOWN,
                conditions=[lease_is_current, lease_not_expired])
    def station_interrupted(self, ctx):
        """The station itself cannot tell whether the OS got the job (it stopped mid hand-off)."""
        self._station_facts(ctx)
        self.unknown_reason = f"station reported it was interrupted: {ctx.payload.get('reason', '')}"
        self._ended(ctx, S.UNKNOWN)

    # --- rules: silence --------------------------------------------------------------------------
    @transition(field=state, source=[S.SENT, S.PRINTING], target=S.UNKNOWN)
    def silence_deadline_passed(self, ctx):
        """No word from the station by the deadline. Never retried: a human (or a late ack) settles it."""
        self.unknown_reason = (f"no report from the station since the job entered {self.state} "
                               f"(deadline {self.report_deadline.isoformat() if self.report_deadline else '-'})")
        self._ended(ctx, S.UNKNOWN)

    # --- rules: operators ------------------------------------------------------------------------
    @transition(field=state, source=S.UNKNOWN, target=RETURN_VALUE(S.COMPLETED, S.FAILED), custom={"repair": True})
    def operator_settled(self, ctx):
        """An operator looked at the printer and says how it ended."""
        outcome = ctx.payload.get("outcome")
        if outcome not in (S.COMPLETED, S.FAILED):
            raise ctx.reject("illegal", "outcome must be 'completed' or 'failed'")
        self.settled_by = "operator"
        if outcome == S.COMPLETED:
            self._record_usage(ctx)
        else:
            self.failure_reason = f"settled by an operator: {ctx.reason}"
        self._announce(ctx, outcome)
        return outcome


class UsageRecord(models.Model):
    """What is billed: one row per completed job, written in the transition into ``completed``."""

    job = models.OneToOneField(PrintJob, on_delete=models.PROTECT, related_name="usage")
    station = models.ForeignKey(Station, on_delete=models.PROTECT, related_name="usage")
    copies = models.PositiveSmallIntegerField()
    content_bytes = models.PositiveIntegerField()
    recorded_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"usage for print job {self.job_id}"


class WebhookEndpoint(models.Model):
    """An integrator's URL for signed print-job events. The secret signs; it is shown once."""

    url = models.URLField(max_length=500)
    event_types = models.JSONField(default=list)
    secret = models.CharField(max_length=100)
    active = models.BooleanField(default=True)
    description = models.CharField(max_length=200, blank=True, default="")
    created_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"webhook endpoint {self.pk} → {self.url}"

    def wants(self, event_type: str) -> bool:
        return self.active and ("*" in self.event_types or "print_job.*" in self.event_types
                                or event_type in self.event_types)

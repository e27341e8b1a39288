"""Writers of the printing app. Every state change goes through ``workflow.kernel``.

Stations: ``station_create``, ``station_heartbeat``. Jobs: ``print_job_submit`` (and its dry run
``print_job_check``), ``print_job_cancel``, ``print_job_claim`` (the lease), ``print_job_report``
and ``station_ledger_replay`` (the station's reports), ``print_job_settle`` (operators),
``print_job_purge_content`` (retention). Webhooks: ``webhook_endpoint_create``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import secrets
import time
from datetime import timedelta
from typing import Any

from django.db import transaction

from workflow import clock, kernel
from workflow.errors import NotFound, StateTransitionRejected, ValidationFailed
from workflow.inputs import MAX_ID
from workflow.kernel import Outcome
from workflow.models import Transition

from . import conf
from .models import ContentType, PrintJob, PrintJobState, Station, UsageRecord, WebhookEndpoint
from .webhooks import EVENT_TYPES

S = PrintJobState


# --- stations ------------------------------------------------------------------------------------
def station_create(*, name: str) -> tuple[Station, str]:
    """A new station and its token (shown once; only its SHA-256 is stored)."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise ValidationFailed("station name must be 1..100 characters", details={"field": "name"})
    raw, prefix, digest = Station.generate_token()
    station = Station.objects.create(name=name, prefix=prefix, secret_hash=digest, created_at=clock.now())
    return station, raw


SEEN_WRITE_EVERY_SECONDS = 2


def station_seen(*, station: Station) -> None:
    """A claim or report is a sign of life (written at most every few seconds: long polls loop)."""
    now = clock.now()
    last = station.last_seen_at
    if last is not None and 0 <= (now - last).total_seconds() < SEEN_WRITE_EVERY_SECONDS:
        return
    Station.objects.filter(pk=station.pk).update(last_seen_at=now)
    station.last_seen_at = now


def station_heartbeat(*, station: Station, info: dict[str, Any]) -> Station:
    now = clock.now()
    facts = {k: info[k] for k in ("station_version", "output", "open_jobs", "ledger_jobs") if k in info}
    Station.objects.filter(pk=station.pk).update(last_seen_at=now, last_heartbeat=facts)
    station.last_seen_at, station.last_heartbeat = now, facts
    return station


# --- submitting ----------------------------------------------------------------------------------
@dataclasses.dataclass
class Problem:
    field: str
    code: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Submission:
    station: Station | None
    content: bytes
    content_type: str
    title: str
    copies: int
    expires_in_seconds: int
    business_object_type: str
    business_object_id: str


def _int(value: Any) -> int | None:
    """An integer that fits a bigint column (bigger ones reached PostgreSQL and failed there: a 500)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value.strip()) <= 20:
        value = int(value)
    if isinstance(value, int) and -MAX_ID <= value <= MAX_ID:
        return value
    return None


def print_job_check(*, data: dict[str, Any]) -> tuple[Submission | None, list[Problem]]:
    """Judge a submission without writing anything: the cleaned submission, or every problem found."""
    problems: list[Problem] = []
    if not isinstance(data, dict):
        return None, [Problem("", "invalid", "the body must be a JSON object")]

    station = None
    station_id = _int(data.get("station_id"))
    if station_id is None:
        problems.append(Problem("station_id", "required", "station_id (an integer) is required"))
    else:
        station = Station.objects.filter(pk=station_id).first()
        if station is None:
            problems.append(Problem("station_id", "not_found", f"no station {station_id}"))
        elif not station.active:
            problems.append(Problem("station_id", "inactive", f"station {station_id} is deactivated"))

    content_type = data.get("content_type")
    if content_type not in ContentType.values:
        problems.append(Problem("content_type", "invalid",
                                f"content_type must be one of {', '.join(ContentType.values)}"))

    content = b""
    raw = data.get("content_base64")
    if not isinstance(raw, str) or not raw:
        problems.append(Problem("content_base64", "required", "content_base64 (base64 of the document) is required"))
    else:
        try:
            content = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            problems.append(Problem("content_base64", "invalid", "content_base64 is not valid base64"))
        else:
            limit = int(conf.get("PRINT_JOB_MAX_CONTENT_BYTES"))
            if not content:
                problems.append(Problem("content_base64", "empty", "the document is empty"))
            elif len(content) > limit:
                problems.append(Problem("content_base64", "too_large",
                                        f"the document is {len(content)} bytes; the limit is {limit}"))
            elif content_type == ContentType.PDF and not content.startswith(b"%PDF-"):
                problems.append(Problem("content_base64", "not_pdf", "content_type is pdf but the content does "
                                                                     "not start with %PDF-"))
            elif content_type == ContentType.TEXT:
                try:
                    content.decode("utf-8")
                except UnicodeDecodeError:
                    problems.append(Problem("content_base64", "not_text", "content_type is text but the content "
                                                                          "is not UTF-8"))

    title = data.get("title", "")
    if not isinstance(title, str) or len(title) > 200:
        problems.append(Problem("title", "invalid", "title must be a string of at most 200 characters"))
        title = ""

    copies = data.get("copies", 1)
    copies_int = _int(copies)
    max_copies = int(conf.get("PRINT_JOB_MAX_COPIES"))
    if copies_int is None or not 1 <= copies_int <= max_copies:
        problems.append(Problem("copies", "out_of_range", f"copies must be an integer from 1 to {max_copies}"))

    expires = data.get("expires_in_seconds")
    expires_int = conf.expires_default() if "expires_in_seconds" not in data else _int(expires)
    low, high = conf.expires_min(), conf.expires_max()
    if expires_int is None or not low <= expires_int <= high:
        problems.append(Problem("expires_in_seconds", "out_of_range",
                                f"expires_in_seconds must be an integer from {low} to {high} (got {expires!r})"))

    ref_type = ref_id = ""
    ref = data.get("business_object")
    if "business_object" in data:  # present means an object: an explicit null is a mistake, not "none"
        if (not isinstance(ref, dict) or not isinstance(ref.get("type", ""), str)
                or not isinstance(ref.get("id", ""), str | int) or isinstance(ref.get("id"), bool)):
            problems.append(Problem("business_object", "invalid", 'business_object must be {"type": str, "id": str}'))
        else:
            ref_type, ref_id = str(ref.get("type", "")), str(ref.get("id", ""))
            if len(ref_type) > 64 or len(ref_id) > 128:
                problems.append(Problem("business_object", "too_long", "type ≤ 64 and id ≤ 128 characters"))

    unknown = sorted(set(data) - {"station_id", "content_type", "content_base64", "title", "copies",
                                  "expires_in_seconds", "business_object"})
    for field in unknown:
        problems.append(Problem(field, "unknown_field", f"unknown field {field!r}"))

    if problems:
        return None, problems
    return Submission(station=station, content=content, content_type=content_type, title=title,
                      copies=copies_int, expires_in_seconds=expires_int, business_object_type=ref_type,
                      business_object_id=ref_id), []


def print_job_submit(*, data: dict[str, Any], actor: str) -> PrintJob:
    submission, problems = print_job_check(data=data)
    if problems:
        first = problems[0]
        raise ValidationFailed(f"{first.field}: {first.message}" if first.field else first.message,
                               details={"errors": [p.as_dict() for p in problems]})
    now = clock.now()
    expires_at = now + timedelta(seconds=submission.expires_in_seconds)
    return kernel.create(
        PrintJob, actor=actor, reason="submitted",
        payload={"station_id": submission.station.pk, "content_sha256": hashlib.sha256(submission.content).hexdigest(),
                 "expires_in_seconds": submission.expires_in_seconds},
        station=submission.station, title=submission.title, copies=submission.copies,
        content_type=submission.content_type, content=submission.content, content_size=len(submission.content),
        content_sha256=hashlib.sha256(submission.content).hexdigest(),
        expires_in_seconds=submission.expires_in_seconds, expires_at=expires_at,
        business_object_type=submission.business_object_type, business_object_id=submission.business_object_id,
        submitted_by=actor,
    )


# --- cancel ----------------------------------------------------------------------------------------
def print_job_cancel(*, job_id: int, actor: str) -> Outcome:
    """Cancel while pending. Anything else is a 409 naming the current state (a sent job cannot be recalled)."""
    job = PrintJob.objects.filter(pk=job_id).first()
    if job is None:
        raise NotFound(f"print job {job_id} not found")
    # One identity per stay in pending: a cancel refused while dispatching must not answer for a later
    # stay; asking again once canceled replays the cancel that did it (already_applied).
    done = (Transition.objects.filter(aggregate_type=PrintJob.aggregate_label(), aggregate_id=job.pk,
                                      event_type="cancel", result="applied").values_list("event_identity", flat=True)
            .first())
    identity = done or f"cancel:v{job.state_version}"
    outcome = kernel.apply(job, "cancel", identity, {}, actor=actor, reason="canceled by the caller")
    if not outcome.accepted:
        raise StateTransitionRejected(
            f"print job {job_id} is {outcome.state}; only a pending job can be canceled",
            details={"state": outcome.state, "result": outcome.result, "detail": outcome.detail})
    return outcome


# --- the station protocol ------------------------------------------------------------------------
def _claim_once(*, station: Station) -> PrintJob | None:
    now = clock.now()
    with transaction.atomic():
        candidates = (PrintJob.objects.select_for_update(skip_locked=True)
                      .filter(station=station, state=S.PENDING, expires_at__gt=now)
                      .order_by("created_at", "id"))
        for job in candidates[:5]:
            lease = secrets.token_urlsafe(24)
            outcome = kernel.apply(job, "claimed", f"claim:{job.lease_generation + 1}",
                                   {"station_id": station.pk, "lease_token": lease,
                                    "lease_seconds": conf.lease_seconds()},
                                   actor=station.actor, reason="station claim")
            if outcome.result == "applied":
                return job
    return None


def print_job_claim(*, station: Station, wait_seconds: float) -> PrintJob | None:
    """The oldest due job of this station under a fresh lease, waiting up to ``wait_seconds`` for one.

    ``SELECT … FOR UPDATE SKIP LOCKED`` means two claims (two station processes, two servers) never
    take the same job; the kernel moves it pending → dispatching with a new lease token and a
    fencing token (``lease_generation``) one higher than any before it.
    """
    wait_seconds = max(0.0, min(float(wait_seconds), float(conf.get("PRINT_CLAIM_MAX_WAIT_SECONDS"))))
    deadline = time.monotonic() + wait_seconds
    interval = float(conf.get("PRINT_LONG_POLL_INTERVAL_SECONDS"))
    while True:
        station_seen(station=station)
        job = _claim_once(station=station)
        if job is not None or time.monotonic() >= deadline:
            return job
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


REPORT_EVENTS = {
    "received": "station_received",
    "printing": "station_printing",
    "completed": "station_completed",
    "failed": "station_failed",
    "interrupted": "station_interrupted",
}


MAX_REASON_CHARS = 10_000
REPORT_FIELDS = frozenset({"event_id", "lease_token", "kind", "reason", "os_job_id", "occurred_at"})
_REPORT_LIMITS = {"lease_token": 200, "reason": MAX_REASON_CHARS, "os_job_id": 200, "occurred_at": 64}


def _clean_report(report: dict[str, Any], *, extra_fields: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A station report, strictly: unknown fields, wrong types and overlong text are refused (never cut)."""
    if not isinstance(report, dict):
        raise ValidationFailed("a report must be a JSON object")
    unknown = sorted(set(report) - REPORT_FIELDS - extra_fields)
    if unknown:
        raise ValidationFailed(f"unknown field(s): {', '.join(unknown)}", details={"fields": unknown})
    for field, limit in _REPORT_LIMITS.items():
        value = report.get(field)
        if value is not None and (not isinstance(value, str) or len(value) > limit):
            raise ValidationFailed(f"{field} must be a string of at most {limit} characters",
                                   details={"field": field})
    event_id = report.get("event_id")
    if not isinstance(event_id, str) or not 1 <= len(event_id) <= 200:
        raise ValidationFailed("event_id (1..200 characters) is required", details={"field": "event_id"})
    kind = report.get("kind")
    if not isinstance(kind, str) or kind not in REPORT_EVENTS:
        raise ValidationFailed(f"kind must be one of {', '.join(REPORT_EVENTS)}", details={"field": "kind"})
    lease = report.get("lease_token")
    if not isinstance(lease, str) or not lease:
        raise ValidationFailed("lease_token is required", details={"field": "lease_token"})
    reason = report.get("reason")
    if kind in ("failed", "interrupted") and (not isinstance(reason, str) or not reason.strip()):
        raise ValidationFailed(f"a {kind} report needs a reason", details={"field": "reason"})
    payload = {"kind": kind, "lease_token": lease}
    if isinstance(reason, str):
        payload["reason"] = reason
    if report.get("os_job_id"):
        payload["os_job_id"] = report["os_job_id"]
    if report.get("occurred_at"):
        payload["occurred_at"] = report["occurred_at"]
    return {"event_id": event_id, "event_type": REPORT_EVENTS[kind], "payload": payload}


def print_job_report(*, station: Station, job_id: int, report: dict[str, Any],
                     extra_fields: frozenset[str] = frozenset()) -> Outcome:
    """One station report through the kernel. Identity ``station:<event_id>``: a retry is already_applied."""
    cleaned = _clean_report(report, extra_fields=extra_fields)
    if not PrintJob.objects.filter(pk=job_id, station=station).exists():
        # Another station's job is reported exactly like a job that does not exist.
        raise NotFound(f"print job {job_id} not found")
    station_seen(station=station)
    return kernel.apply((PrintJob, job_id), cleaned["event_type"], f"station:{cleaned['event_id']}",
                        cleaned["payload"], actor=station.actor, reason=f"station report: {cleaned['payload']['kind']}")


MAX_LEDGER_ENTRIES = 500


def station_ledger_replay(*, station: Station, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A restarted station's ledger: each entry is a report it made (or owed); answered one by one.

    This is how ``unknown`` is settled by a late acknowledgement (``unknown → completed|failed``).
    """
    if not isinstance(entries, list) or len(entries) > MAX_LEDGER_ENTRIES:
        raise ValidationFailed(f"entries must be a list of at most {MAX_LEDGER_ENTRIES} reports",
                               details={"field": "entries"})
    results = []
    for entry in entries:
        job_id = _int(entry.get("job_id")) if isinstance(entry, dict) else None
        event_id = entry.get("event_id") if isinstance(entry, dict) else None
        head = {"job_id": entry.get("job_id") if isinstance(entry, dict) else None, "event_id": event_id}
        if job_id is None:
            results.append({**head, "error": {"code": "E_VALIDATION", "message": "job_id is required"}})
            continue
        try:
            outcome = print_job_report(station=station, job_id=job_id, report=entry,
                                       extra_fields=frozenset({"job_id"}))
        except (ValidationFailed, NotFound) as exc:
            results.append({**head, "error": {"code": str(exc.code), "message": exc.message}})
            continue
        results.append({**head, **outcome.as_dict()})
    return results


# --- operators -------------------------------------------------------------------------------------
def print_job_settle(*, job_id: int, outcome: str, actor: str, reason: str, dry_run: bool = False) -> Outcome:
    """An operator settles an ``unknown`` job after looking at the printer (a repair: actor + reason)."""
    if outcome not in (S.COMPLETED, S.FAILED):
        raise ValidationFailed("outcome must be 'completed' or 'failed'", details={"field": "outcome"})
    identity = f"settle:{outcome}:{hashlib.sha256(reason.encode()).hexdigest()[:16]}"
    return kernel.apply((PrintJob, job_id), "operator_settled", identity, {"outcome": outcome},
                        actor=actor, reason=reason, dry_run=dry_run)


# --- retention -------------------------------------------------------------------------------------
def print_job_purge_content(*, limit: int = 500) -> int:
    """Delete the content of jobs terminal for longer than the retention; keep everything else.

    Not a state change (the state and its history stay as they are), so it is a plain field update.
    """
    cutoff = clock.now() - timedelta(seconds=conf.content_retention_seconds())
    due = list(PrintJob.objects.filter(terminal_at__lte=cutoff, content_purged_at__isnull=True)
               .order_by("terminal_at").values_list("pk", flat=True)[:limit])
    if not due:
        return 0
    return PrintJob.objects.filter(pk__in=due, content_purged_at__isnull=True).update(
        content=None, content_purged_at=clock.now())


def usage_for(job: PrintJob) -> UsageRecord | None:
    return UsageRecord.objects.filter(job=job).first()


# --- webhooks --------------------------------------------------------------------------------------
def webhook_endpoint_create(*, url: str, event_types: list[str] | None, description: str = "",
                            actor: str) -> tuple[WebhookEndpoint, str]:
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > 500:
        raise ValidationFailed("url must be an http(s) URL of at most 500 characters", details={"field": "url"})
    types = event_types or ["print_job.*"]
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise ValidationFailed("event_types must be a list of strings", details={"field": "event_types"})
    allowed = set(EVENT_TYPES) | {"print_job.*", "*"}
    wrong = [t for t in types if t not in allowed]
    if wrong:
        raise ValidationFailed(f"unknown event types: {', '.join(wrong)}",
                               details={"field": "event_types", "allowed": sorted(allowed)})
    secret = "whsec_" + secrets.token_urlsafe(32)
    endpoint = WebhookEndpoint.objects.create(url=url, event_types=sorted(set(types)), secret=secret,
                                              description=(description or "")[:200], created_by=actor,
                                              created_at=clock.now())
    return endpoint, secret

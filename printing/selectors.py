"""Reads of the printing app: the "did it print?" view of a job, stations, the bounded wait."""

from __future__ import annotations

import time
from typing import Any

from workflow import clock
from workflow.errors import NotFound, ValidationFailed
from workflow.kernel import timeline
from workflow.models import STATE_CHANGING_RESULTS

from . import conf
from .models import STATE_MEANING, TERMINAL, PrintJob, PrintJobState, Station, UsageRecord


def print_job_get(*, job_id: int, station: Station | None = None) -> PrintJob:
    jobs = PrintJob.objects.select_related("station")
    if station is not None:
        jobs = jobs.filter(station=station)
    job = jobs.filter(pk=job_id).first()
    if job is None:
        raise NotFound(f"print job {job_id} not found")
    return job


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def station_summary(station: Station, now=None) -> dict[str, Any]:
    now = now or clock.now()
    return {"id": station.pk, "name": station.name, "connection_status": station.connection_status(now),
            "last_seen_at": _iso(station.last_seen_at)}


def print_job_timeline(job: PrintJob) -> list[dict[str, Any]]:
    """Every classified event of the job, rejected ones included, oldest first."""
    return [{"at": _iso(t.created_at), "event": t.event_type, "from": t.from_state, "to": t.to_state,
             "result": t.result, "actor": t.actor, "detail": t.detail}
            for t in timeline(job)]


def print_job_representation(job: PrintJob, *, now=None) -> dict[str, Any]:
    """What the API answers about a job: the support view's whole answer in one object."""
    now = now or clock.now()
    events = print_job_timeline(job)
    state_times: dict[str, str] = {}
    for e in events:
        if e["result"] in STATE_CHANGING_RESULTS and (e["to"] != e["from"] or e["event"] == "created"):
            state_times[e["to"]] = e["at"]
    usage = UsageRecord.objects.filter(job=job).first()
    return {
        "id": job.pk,
        "state": job.state,
        "state_meaning": STATE_MEANING[job.state],
        "terminal": job.state in TERMINAL,
        "version": job.state_version,
        "entered_state_at": _iso(job.entered_state_at),
        "created_at": _iso(job.created_at),
        "state_times": state_times,
        "timeline": events,
        "station": station_summary(job.station, now),
        "title": job.title,
        "copies": job.copies,
        "content_type": job.content_type,
        "content_size": job.content_size,
        "content_sha256": job.content_sha256,
        "content_purged_at": _iso(job.content_purged_at),
        "expires_in_seconds": job.expires_in_seconds,
        "expires_at": _iso(job.expires_at),
        "business_object": ({"type": job.business_object_type, "id": job.business_object_id}
                            if job.business_object_type or job.business_object_id else None),
        "submitted_by": job.submitted_by,
        "os_job_id": job.os_job_id or None,
        "failure_reason": job.failure_reason or None,
        "unknown_reason": job.unknown_reason or None,
        "settled_by": job.settled_by or None,
        "fencing_token": job.lease_generation,
        "billable": usage is not None,
        "usage": ({"copies": usage.copies, "content_bytes": usage.content_bytes,
                   "recorded_at": _iso(usage.recorded_at)} if usage else None),
        "allowed_events": job.allowed_events(),
    }


def claim_representation(job: PrintJob) -> dict[str, Any]:
    """What a station receives with a claim: the document and the lease it must report under."""
    import base64

    return {
        "id": job.pk,
        "lease_token": job.lease_token,
        "fencing_token": job.lease_generation,
        "lease_expires_at": _iso(job.lease_expires_at),
        "title": job.title,
        "copies": job.copies,
        "content_type": job.content_type,
        "content_base64": base64.b64encode(bytes(job.content or b"")).decode(),
        "content_sha256": job.content_sha256,
        "expires_at": _iso(job.expires_at),
        "business_object": ({"type": job.business_object_type, "id": job.business_object_id}
                            if job.business_object_type or job.business_object_id else None),
    }


def parse_until(until: str | None) -> set[str]:
    words = [w.strip() for w in (until or "terminal").split(",") if w.strip()]
    targets: set[str] = set()
    for word in words:
        if word == "terminal":
            targets |= set(TERMINAL)
        elif word in PrintJobState.values:
            targets.add(word)
        else:
            raise ValidationFailed(f"until must be 'terminal' or states ({', '.join(PrintJobState.values)})",
                                   details={"field": "until", "value": word})
    return targets


def print_job_wait(*, job_id: int, until: str | None, timeout: float | None) -> tuple[PrintJob, bool]:
    """Long poll (bounded): the job once it is in one of ``until``'s states, or as it is at the timeout."""
    targets = parse_until(until)
    limit = float(conf.get("PRINT_WAIT_MAX_TIMEOUT_SECONDS"))
    try:
        seconds = 30.0 if timeout in (None, "") else float(timeout)
    except (TypeError, ValueError):
        raise ValidationFailed("timeout must be a number of seconds", details={"field": "timeout"})
    if not 0 <= seconds <= limit:
        raise ValidationFailed(f"timeout must be between 0 and {int(limit)} seconds", details={"field": "timeout"})
    deadline = time.monotonic() + seconds
    interval = float(conf.get("PRINT_LONG_POLL_INTERVAL_SECONDS"))
    while True:
        job = print_job_get(job_id=job_id)
        if job.state in targets:
            return job, True
        if time.monotonic() >= deadline:
            return job, False
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def print_job_search(*, query: str, limit: int = 50) -> list[PrintJob]:
    """"Did it print?": a job id, or the business object it came from ("order:1842" or just "1842")."""
    query = (query or "").strip()
    if not query:
        return []
    jobs = PrintJob.objects.select_related("station").order_by("-created_at", "-id")
    if query.isdigit():
        by_id = list(jobs.filter(pk=int(query)))
        by_object = list(jobs.filter(business_object_id=query)[:limit])
        return by_id + [j for j in by_object if j.pk != int(query)]
    kind, sep, ident = query.partition(":")
    if sep:
        return list(jobs.filter(business_object_type=kind, business_object_id=ident)[:limit])
    return list(jobs.filter(business_object_id=query)[:limit])

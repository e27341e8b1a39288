"""Outbound webhooks for print-job state changes: promised in the transition, delivered by the outbox.

Each state change becomes one event per subscribed endpoint, promised with ``ctx.emit`` inside the
rule (so it exists if and only if the transition committed) under a stable key. The body is fixed when
promised; every delivery attempt signs it afresh like Stripe does::

    Ledgerflow-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>

Receivers verify the HMAC over the raw body, reject timestamps outside their tolerance, and dedupe on
``Ledgerflow-Event-Id`` (a retry after a lost acknowledgement delivers the same event again).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

EFFECT_TYPE = "printing.webhook"
SIGNATURE_HEADER = "Ledgerflow-Signature"
EVENT_ID_HEADER = "Ledgerflow-Event-Id"
EVENT_TYPES = [f"print_job.{state}" for state in (
    "pending", "dispatching", "sent", "printing", "completed", "failed", "canceled", "expired", "unknown")]


def event_id_for(job_id: int, identity: str) -> str:
    return "evt_" + hashlib.sha256(f"print_job:{job_id}:{identity}".encode()).hexdigest()[:32]


def job_snapshot(job, state: str, now) -> dict[str, Any]:
    return {
        "id": job.pk,
        "object": "print_job",
        "state": str(state),
        "station_id": job.station_id,
        "title": job.title,
        "copies": job.copies,
        "content_type": job.content_type,
        "business_object": ({"type": job.business_object_type, "id": job.business_object_id}
                            if job.business_object_type or job.business_object_id else None),
        "expires_at": job.expires_at.isoformat() if job.expires_at else None,
        "os_job_id": job.os_job_id or None,
        "failure_reason": job.failure_reason or None,
        "unknown_reason": job.unknown_reason or None,
        "state_changed_at": now.isoformat(),
    }


def announce_state_change(job, ctx, target: str, *, previous: str | None = None) -> None:
    """Inside a rule (or creation): promise one signed event per endpoint that wants it."""
    from .models import WebhookEndpoint

    event_type = f"print_job.{target}"
    endpoints = [e for e in WebhookEndpoint.objects.filter(active=True).order_by("id") if e.wants(event_type)]
    if not endpoints:
        return
    event_id = event_id_for(job.pk, ctx.identity)
    event = {"id": event_id, "type": event_type, "created": int(ctx.now.timestamp()),
             "previous_state": previous if previous is not None else str(job.state),
             "data": {"object": job_snapshot(job, target, ctx.now)}}
    for endpoint in endpoints:
        ctx.emit(EFFECT_TYPE, key=f"webhook:{endpoint.pk}:{event_id}", payload={"endpoint_id": endpoint.pk,
                                                                                 "event": event})


def sign(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, header: str, body: bytes, *, now: int, tolerance: int = 300) -> bool:
    """What a receiver does (used by our tests; integrators copy it)."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        timestamp = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs(now - timestamp) > tolerance:
        return False
    candidates = [v for k, v in (p.split("=", 1) for p in header.split(",") if "=" in p) if k == "v1"]
    expected = sign(secret, timestamp, body).split("v1=", 1)[1]
    return any(hmac.compare_digest(expected, c) for c in candidates)


def encode(event: dict[str, Any]) -> bytes:
    return json.dumps(event, sort_keys=True, separators=(",", ":")).encode()

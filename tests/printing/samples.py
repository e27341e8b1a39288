"""Print jobs in any state, with facts that satisfy each rule's guards (for the generic table test)."""

from __future__ import annotations

from datetime import timedelta

from printing.models import PrintJob
from printing.services import station_create
from tests.machines import MachineSamples, register
from workflow import clock, kernel

LEASE = "lease-table-test"


def build_print_job(state: str, *, station=None, expires_in: int = 3600, content: bytes = b"hello\n") -> PrintJob:
    """A job sitting in ``state`` under a current, unexpired lease (as if a station had claimed it)."""
    if station is None:
        station, _ = station_create(name="table-test-station")
    now = clock.now()
    expires_at = now + timedelta(seconds=expires_in)
    leased = state != "pending"
    return kernel.create(
        PrintJob, actor="test", state=state, station=station, title="sample", copies=1, content_type="text",
        content=content, content_size=len(content), content_sha256="0" * 64, expires_in_seconds=expires_in,
        expires_at=expires_at,
        lease_generation=1 if leased else 0, lease_token=LEASE if leased else "",
        lease_expires_at=now + timedelta(seconds=30) if state == "dispatching" else None,
        report_deadline=now + timedelta(seconds=600) if state in ("sent", "printing") else None,
        terminal_at=now if state in PrintJob.TERMINAL_STATES else None,
    )


def _report(kind: str, **extra):
    return lambda job: {"kind": kind, "lease_token": LEASE, **extra}


register(MachineSamples(
    model=PrintJob,
    build=build_print_job,
    payloads={
        "claimed": lambda job: {"station_id": job.station_id, "lease_token": "lease-new", "lease_seconds": 30},
        "station_received": _report("received"),
        "station_printing": _report("printing", os_job_id="q-1"),
        "station_completed": _report("completed", os_job_id="q-1"),
        "station_failed": _report("failed", reason="paper jam"),
        "station_interrupted": _report("interrupted", reason="stopped mid hand-off"),
        "operator_settled": lambda job: {"outcome": "completed"},
    },
))

"""Print jobs in the console: titles, the station section, "settle unknown", and "did it print?"."""

from __future__ import annotations

from django import forms
from django.db.models import Q

from printing import services
from printing.models import PrintJob
from workflow import clock

from .. import lookup, registry


def _title(job: PrintJob) -> str:
    obj = f"{job.business_object_type} {job.business_object_id}".strip()
    return " · ".join(p for p in (job.title or "untitled", obj, f"station {job.station.name}") if p)


def _search(query: str):
    return (
        PrintJob.objects.select_related("station")
        .filter(Q(business_object_id=query) | Q(os_job_id=query) | Q(title__iexact=query))
        .order_by("-id")
    )


def _station_facts(job: PrintJob) -> list[tuple[str, object]]:
    station = job.station
    now = clock.now()
    return [
        ("station", f"{station.name} — {station.connection_status(now)}"),
        ("station last heard", station.last_seen_at or "never"),
        ("business object", f"{job.business_object_type} {job.business_object_id}".strip()),
        ("failure reason (verbatim)", job.failure_reason),
        ("why unknown (verbatim)", job.unknown_reason),
        ("printer's job id", job.os_job_id),
        ("copies", job.copies),
        ("settled by", job.settled_by),
        ("submitted by", job.submitted_by),
    ]


class SettleForm(registry.RepairForm):
    outcome = forms.ChoiceField(
        choices=[("completed", "it printed (completed)"), ("failed", "it did not print (failed)")],
        help_text="What you saw at the printer.",
    )


def _settle(req: registry.RepairRequest, dry_run: bool):
    return services.print_job_settle(
        job_id=req.aggregate.pk, outcome=req.data["outcome"], actor=req.actor, reason=req.reason, dry_run=dry_run
    )


registry.register(
    PrintJob,
    title=_title,
    search=_search,
    why=lambda job: (
        (f"Station said: {job.unknown_reason}" if job.unknown_reason else "")
        + (f" Failure: {job.failure_reason}" if job.failure_reason else "")
    ),
    sections=[
        registry.Section(
            "Station and printer", "ops_console/integrations/facts.html", lambda job: {"facts": _station_facts(job)}
        )
    ],
    repairs=[
        registry.Repair(
            key="settle-unknown",
            label="Settle this unknown job after inspecting the printer",
            event_type="operator_settled",
            applies=lambda job: job.state == PrintJob.State.UNKNOWN,
            form_class=SettleForm,
            description="Nobody knows whether it printed (the station went silent or was interrupted). "
            "Look at the printer, then say how it ended.",
            preview=lambda req: _settle(req, True),
            submit=lambda req: _settle(req, False),
        )
    ],
)

registry.register_page(
    "did-it-print",
    title="Did it print?",
    view=lookup.support_lookup_view(
        PrintJob,
        title="Did it print?",
        search=_search,
        facts=_station_facts,
        placeholder="print job id, business object id or printer job id",
    ),
)

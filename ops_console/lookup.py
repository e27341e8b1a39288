"""A ready-made support page: "where is X and why" for one machine, searched by id or business reference.

Printing fills "did it print?" with it in a few lines (see docs/console.md):

    registry.register_page("did-it-print", title="Did it print?", view=lookup.support_lookup_view(
        PrintJob, title="Did it print?",
        search=lambda q: PrintJob.objects.filter(Q(external_ref=q) | Q(order_reference=q)),
        facts=lambda job: [("failure reason (verbatim)", job.failure_reason),
                           ("station", f"{job.station.name} — {job.station.connection_status()}"),
                           ("business object", job.external_ref)],
    ))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from workflow.machine import StateMachine

from . import registry, selectors


def support_lookup_view(
    model: type[StateMachine],
    *,
    title: str,
    search: Callable[[str], Iterable[StateMachine]] | None = None,
    facts: Callable[[StateMachine], list[tuple[str, Any]]] | None = None,
    placeholder: str = "id or business reference",
    limit: int = 20,
) -> Callable[[HttpRequest], HttpResponse]:
    """A view (wrap it with ``registry.register_page``) listing, for each match: the state and why, the
    time of each transition, the app's facts verbatim, and a link to the full record."""

    def view(request: HttpRequest) -> HttpResponse:
        query = request.GET.get("q", "").strip()
        matches: list[StateMachine] = []
        if query:
            if query.isdigit():
                matches.extend(model.objects.filter(pk=int(query)))
            if search is not None:
                seen = {m.pk for m in matches}
                matches.extend(m for m in list(search(query))[:limit] if m.pk not in seen)
        entry = registry.machine_entry(model)
        results = []
        for aggregate in matches[:limit]:
            row = selectors.aggregate_classification(aggregate)
            timeline = selectors.aggregate_timeline(aggregate)
            outbox_items = selectors.aggregate_outbox(aggregate)
            results.append(
                {
                    "aggregate": aggregate,
                    "label": model.aggregate_label(),
                    "title": entry.title_of(aggregate),
                    "row": row,
                    "why": selectors.explain(aggregate, row, timeline, outbox_items),
                    "timeline": timeline,
                    "facts": facts(aggregate) if facts else [],
                }
            )
        return render(
            request,
            "ops_console/lookup.html",
            {
                "page_title": title,
                "query": query,
                "results": results,
                "placeholder": placeholder,
                "machine_name": model.MACHINE_NAME or model.aggregate_label(),
            },
        )

    return view

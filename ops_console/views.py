"""Server-rendered console pages. Views read through selectors and write through services; no logic here."""

from __future__ import annotations

from urllib.parse import urlencode

from django import forms
from django.apps import apps
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse

from workflow import clock
from workflow.errors import LedgerflowError
from workflow.machine import StateMachine, machine_for, machines
from workflow.models import OutboxItem

from . import diagrams, registry, selectors, services
from .roles import actor_for, console_view, is_operator
from .selectors import Classification, WaitingFilter


def _machine_or_404(label: str) -> type[StateMachine]:
    try:
        return machine_for(label)
    except (LookupError, ValueError):
        raise Http404(f"no machine {label!r}")


def _aggregate_or_404(label: str, pk: int) -> tuple[type[StateMachine], StateMachine]:
    model = _machine_or_404(label)
    aggregate = model.objects.filter(pk=pk).first()
    if aggregate is None:
        raise Http404(f"{label} {pk} not found")
    return model, aggregate


def detail_url(label: str, pk: int) -> str:
    return reverse("console:detail", args=[label, pk])


# --- dashboard ----------------------------------------------------------------------------------
@console_view()
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "ops_console/dashboard.html",
        {
            "summaries": selectors.machine_summaries(),
            "outbox": selectors.outbox_summary(),
            "classes": [(c, Classification.LABELS[c], n) for c, n in selectors.classification_counts().items()],
            "mismatches": selectors.history_mismatches(),
            "rejections": selectors.recent_rejections(),
            "now": clock.now(),
        },
    )


# --- waiting states -----------------------------------------------------------------------------
class WaitingFilterForm(forms.Form):
    machine = forms.ChoiceField(required=False)
    state = forms.ChoiceField(required=False)
    classification = forms.ChoiceField(
        required=False, choices=[("", "any classification"), *Classification.LABELS.items()]
    )
    older_than_minutes = forms.IntegerField(required=False, min_value=0, label="older than (minutes)")
    sort = forms.ChoiceField(
        required=False,
        choices=[
            ("age", "oldest first"),
            ("-age", "newest first"),
            ("classification", "most urgent first"),
            ("machine", "machine"),
            ("state", "state"),
            ("attempts", "most attempts"),
            ("next_retry", "next retry"),
        ],
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        all_machines = sorted(machines(), key=lambda m: m.aggregate_label())
        self.fields["machine"].choices = [("", "any machine")] + [
            (m.aggregate_label(), f"{m.MACHINE_NAME or m.aggregate_label()} ({m.aggregate_label()})")
            for m in all_machines
        ]
        states = sorted({s for m in all_machines for s in selectors.waiting_states(m)})
        self.fields["state"].choices = [("", "any waiting state")] + [(s, s) for s in states]


@console_view()
def waiting(request: HttpRequest) -> HttpResponse:
    form = WaitingFilterForm(request.GET or None)
    data = form.cleaned_data if form.is_valid() else {}
    minutes = data.get("older_than_minutes")
    flt = WaitingFilter(
        machine=data.get("machine") or None,
        state=data.get("state") or None,
        classification=data.get("classification") or None,
        older_than_seconds=minutes * 60 if minutes else None,
        sort=data.get("sort") or "age",
    )
    try:
        page_number = int(request.GET.get("page", "1"))
    except ValueError:
        page_number = 1
    page = selectors.waiting_list(flt, page=page_number)
    query = {k: v for k, v in request.GET.items() if k != "page" and v}
    return render(
        request,
        "ops_console/waiting.html",
        {
            "form": form,
            "page": page,
            "query": urlencode(query),
            "prev_page": page.page - 1 if page.page > 1 else None,
            "next_page": page.page + 1 if page.page < page.pages else None,
        },
    )


# --- detail -------------------------------------------------------------------------------------
def _detail_context(request: HttpRequest, model: type[StateMachine], aggregate: StateMachine) -> dict:
    entry = registry.machine_entry(model)
    operator = is_operator(request.user)
    repairs = entry.repairs_for(aggregate)
    legal = []
    for event_type in aggregate.allowed_events():
        rule = model.rule_for(aggregate.state, event_type)
        legal.append(
            {
                "event": event_type,
                "targets": model.possible_targets(rule),
                "repair": bool(rule.custom.get("repair")),
                "guards": [getattr(c, "detail", getattr(c, "__name__", "")) for c in rule.conditions or []],
            }
        )
    sections = [
        {"title": s.title, "html": render_to_string(s.template, s.context(aggregate), request=request)}
        for s in entry.sections
    ]
    owner_link = None
    if isinstance(aggregate, OutboxItem) and aggregate.aggregate_type and aggregate.aggregate_id:
        owner_link = {
            "label": aggregate.aggregate_type,
            "id": aggregate.aggregate_id,
            "url": detail_url(aggregate.aggregate_type, aggregate.aggregate_id),
        }
    policy = model.WAIT_POLICIES.get(aggregate.state)
    row = selectors.aggregate_classification(aggregate)
    timeline = selectors.aggregate_timeline(aggregate)
    outbox_items = selectors.aggregate_outbox(aggregate)
    return {
        "model": model,
        "label": model.aggregate_label(),
        "aggregate": aggregate,
        "machine_name": model.MACHINE_NAME or model.aggregate_label(),
        "title": entry.title_of(aggregate),
        "owner": entry.owner_of(aggregate),
        "current_attempt": entry.current_attempt(aggregate) if entry.current_attempt else "",
        "policy": policy,
        "terminal": aggregate.is_terminal(),
        "row": row,
        "why": selectors.explain(aggregate, row, timeline, outbox_items),
        "timeline": timeline,
        "outbox_items": outbox_items,
        "own_attempts": list(aggregate.attempt_log.order_by("number")) if isinstance(aggregate, OutboxItem) else [],
        "owner_link": owner_link,
        "timers": selectors.aggregate_timers(aggregate),
        "legal": legal,
        "sections": sections,
        "is_operator": operator,
        "repairs": [{"repair": r, "form": r.form_class(prefix=r.key)} for r in repairs] if operator else [],
        "repair_count": len(repairs),
        "diagram": diagrams.svg(model, aggregate.state),
        "age_seconds": (clock.now() - aggregate.entered_state_at).total_seconds(),
    }


@console_view()
def detail(request: HttpRequest, label: str, pk: int) -> HttpResponse:
    model, aggregate = _aggregate_or_404(label, pk)
    return render(request, "ops_console/detail.html", _detail_context(request, model, aggregate))


# --- repairs ------------------------------------------------------------------------------------
@console_view(operator=True)
def repair(request: HttpRequest, label: str, pk: int, key: str) -> HttpResponse:
    """GET: the form. POST action=preview: the dry run. POST action=submit: apply what was previewed."""
    model, aggregate = _aggregate_or_404(label, pk)
    entry = registry.machine_entry(model)
    offered = entry.repair(aggregate, key)
    if offered is None:
        return render(
            request,
            "ops_console/repair_unavailable.html",
            {"label": label, "aggregate": aggregate, "key": key},
            status=409,
        )
    form = offered.form_class(request.POST or None, prefix=offered.key)
    context = {
        "label": label,
        "aggregate": aggregate,
        "repair": offered,
        "form": form,
        "answer": None,
        "error": None,
        "machine_name": model.MACHINE_NAME or label,
    }
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        reason = data.pop("reason")
        actor = actor_for(request.user)
        action = request.POST.get("action", "preview")
        try:
            if action == "submit":
                previewed = int(request.POST.get("previewed_version", "0") or 0)
                answer = services.repair_submit(
                    aggregate=aggregate,
                    repair=offered,
                    data=data,
                    actor=actor,
                    reason=reason,
                    previewed_version=previewed,
                )
                context.update(answer=answer, submitted=True)
                return render(request, "ops_console/repair_done.html", context)
            context["answer"] = services.repair_preview(
                aggregate=aggregate, repair=offered, data=data, actor=actor, reason=reason
            )
            # kernel.apply(dry_run=True) refreshes the instance it was given with the would-be state:
            # show the record as it is stored.
            context["aggregate"] = model.objects.get(pk=pk)
        except LedgerflowError as exc:
            context["error"] = exc
            if getattr(exc, "details", {}).get("field") == "version":
                aggregate.refresh_from_db()
                context["answer"] = services.repair_preview(
                    aggregate=aggregate, repair=offered, data=data, actor=actor, reason=reason
                )
                context["aggregate"] = model.objects.get(pk=pk)
    return render(request, "ops_console/repair.html", context, status=400 if form.errors else 200)


class BulkRequeueForm(registry.RepairForm):
    effect_type = forms.CharField(required=False, max_length=64)
    expected_count = forms.IntegerField(required=False, min_value=0, widget=forms.HiddenInput)


@console_view()
def dead_letters(request: HttpRequest) -> HttpResponse:
    effect_type = request.GET.get("effect_type") or None
    return render(
        request,
        "ops_console/dead_letters.html",
        {
            "items": selectors.dead_items(effect_type=effect_type)[:200],
            "effect_types": selectors.dead_effect_types(),
            "effect_type": effect_type or "",
            "form": BulkRequeueForm(initial={"effect_type": effect_type or ""}),
            "is_operator": is_operator(request.user),
        },
    )


@console_view(operator=True)
def bulk_requeue(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return redirect("console:dead-letters")
    form = BulkRequeueForm(request.POST)
    context = {"form": form, "preview": None, "done": None, "error": None}
    if form.is_valid():
        reason = form.cleaned_data["reason"]
        effect_type = form.cleaned_data["effect_type"] or None
        actor = actor_for(request.user)
        try:
            if request.POST.get("action") == "submit":
                context["done"] = services.outbox_bulk_requeue(
                    actor=actor,
                    reason=reason,
                    effect_type=effect_type,
                    dry_run=False,
                    expected_count=form.cleaned_data["expected_count"],
                )
            else:
                context["preview"] = services.outbox_bulk_requeue(
                    actor=actor, reason=reason, effect_type=effect_type, dry_run=True
                )
        except LedgerflowError as exc:
            context["error"] = exc
    return render(request, "ops_console/bulk_requeue.html", context, status=400 if form.errors else 200)


# --- diagrams, search, plug-in pages --------------------------------------------------------------
@console_view()
def diagram_list(request: HttpRequest) -> HttpResponse:
    items = [
        {"label": m.aggregate_label(), "name": m.MACHINE_NAME or m.aggregate_label(), "svg": diagrams.svg(m)}
        for m in sorted(machines(), key=lambda m: m.aggregate_label())
    ]
    return render(request, "ops_console/diagrams.html", {"items": items})


@console_view()
def diagram_svg(request: HttpRequest, label: str) -> HttpResponse:
    model = _machine_or_404(label)
    state = request.GET.get("state")
    return HttpResponse(
        diagrams.svg(model, state if state in model.all_states() else None), content_type="image/svg+xml"
    )


@console_view()
def search(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()
    found = selectors.find(query) if query else []
    if len(found) == 1:
        model, obj = found[0]
        return redirect(detail_url(model.aggregate_label(), obj.pk))
    rows = []
    for model, obj in found:
        entry = registry.machine_entry(model)
        rows.append(
            {
                "label": model.aggregate_label(),
                "name": model.MACHINE_NAME,
                "obj": obj,
                "title": entry.title_of(obj),
                "url": detail_url(model.aggregate_label(), obj.pk),
            }
        )
    return render(request, "ops_console/search.html", {"query": query, "rows": rows})


@console_view()
def plugin_page(request: HttpRequest, slug: str) -> HttpResponse:
    page = registry.page(slug)
    if page is not None:
        return page.view(request)
    if slug == "did-it-print":
        printing_installed = apps.is_installed("printing")
        return render(
            request,
            "ops_console/did_it_print_placeholder.html",
            {"printing_installed": printing_installed, "query": request.GET.get("q", "")},
        )
    raise Http404(slug)

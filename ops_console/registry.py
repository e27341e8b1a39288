"""How a machine plugs into the operations console.

The console works for every ``workflow.machine.StateMachine`` without any registration: counts,
waiting list, timeline, outbox work, timers, diagrams, and a generic repair for each rule marked
``custom={"repair": True}``. An app registers only what the console cannot guess:

    from ops_console import registry

    registry.register(
        Order,
        title=lambda order: f"{order.customer_email} · {order.total} {order.currency}",
        current_attempt=lambda order: order.current_attempt_label(),   # optional column
        owner=lambda order: "payments team" if order.state == "refund_pending" else None,
        search=lambda q: Order.objects.filter(reference=q),            # find by business reference
        sections=[registry.Section("Reservations", "orders/console_reservations.html",
                                   lambda order: {"reservations": order.reservations.all()})],
        repairs=[registry.Repair(key="retry-refund", label="Retry the exhausted refund",
                                 event_type="retry_refund", applies=lambda o: o.state == "refund_pending",
                                 preview=lambda req: services.refund_retry(order_id=req.aggregate.pk,
                                     actor=req.actor, reason=req.reason, dry_run=True),
                                 submit=lambda req: services.refund_retry(order_id=req.aggregate.pk,
                                     actor=req.actor, reason=req.reason))],
    )
    registry.register_page("did-it-print", title="Did it print?", view=printing.console.did_it_print)

Call it from the app's ``AppConfig.ready()`` (or a ``console.py`` imported there). See docs/console.md.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse

from workflow.machine import StateMachine

REVIEW_STATE = "manual_review"


# --- repair forms ---------------------------------------------------------------------------------
class RepairForm(forms.Form):
    """Every repair form has a required written reason. Subclass it to add the repair's own fields."""

    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "Why (required; it is recorded)"}),
        max_length=2000,
        strip=True,
        required=True,
    )

    def clean_reason(self) -> str:
        reason = self.cleaned_data["reason"].strip()
        if not reason:
            raise forms.ValidationError("A reason is required.")
        return reason


class EventPayloadForm(RepairForm):
    """The generic repair: a JSON payload for the rule (most repairs need only the reason)."""

    payload = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        initial="{}",
        help_text='JSON object passed to the rule, e.g. {"decision": "ship"}',
    )

    def clean_payload(self) -> dict[str, Any]:
        raw = (self.cleaned_data.get("payload") or "").strip() or "{}"
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}")
        if not isinstance(value, dict):
            raise forms.ValidationError("The payload must be a JSON object.")
        return value


@dataclasses.dataclass
class RepairRequest:
    """What a repair's ``preview``/``submit`` receive."""

    aggregate: StateMachine
    data: dict[str, Any]  # the form's cleaned data (without the reason)
    actor: str  # "user:<username>"
    reason: str
    observed_version: int  # the version the operator previewed

    @property
    def identity(self) -> str:
        """A stable event identity: a double submit of the same previewed repair is ``already_applied``."""
        return f"console:{self.data.get('_repair_key', 'repair')}:v{self.observed_version}"


@dataclasses.dataclass
class Repair:
    """One repair offered on a detail page. ``preview`` must not write (dry run); ``submit`` calls the
    app's service (which goes through ``workflow.kernel.apply``). Both return an ``Outcome`` (or a list)."""

    key: str
    label: str
    preview: Callable[[RepairRequest], Any]
    submit: Callable[[RepairRequest], Any]
    applies: Callable[[StateMachine], bool] = lambda aggregate: True
    form_class: type[RepairForm] = RepairForm
    description: str = ""
    # The machine event it applies: hides the generic repair of the same event.
    event_type: str | None = None


@dataclasses.dataclass
class Section:
    """An extra block on a detail page: a template rendered with ``context(aggregate)``."""

    title: str
    template: str
    context: Callable[[StateMachine], dict[str, Any]]


@dataclasses.dataclass
class ConsoleMachine:
    model: type[StateMachine]
    title: Callable[[StateMachine], str] | None = None
    owner: Callable[[StateMachine], str | None] | None = None
    current_attempt: Callable[[StateMachine], str | None] | None = None
    search: Callable[[str], Iterable[StateMachine]] | None = None
    sections: list[Section] = dataclasses.field(default_factory=list)
    repairs: list[Repair] = dataclasses.field(default_factory=list)
    generic_repairs: bool = True
    # An app's own words appended to the console's one-line "why" (e.g. a print job's unknown_reason).
    why: Callable[[StateMachine], str | None] | None = None
    # state -> classification for states that mean it by themselves, e.g. {"failed": "retries_exhausted"}
    state_classification: dict[str, str] = dataclasses.field(default_factory=dict)
    # (SQL condition over the machine's row aliased ``a``, classification): checked in order, after the
    # evidence rule and before owed work. Trusted code, never user input; write a literal % as %%; portable
    # SQL (it also runs on make run's SQLite: no LATERAL, FILTER, arrays or :: casts). E.g.:
    # ("a.state = 'refund_pending' AND <last applied event is refund_failed>", "retries_exhausted").
    sql_classification: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    # --- what the console asks --------------------------------------------------------------
    def title_of(self, aggregate: StateMachine) -> str:
        if self.title is not None:
            return self.title(aggregate) or ""
        return ""

    def owner_of(self, aggregate: StateMachine) -> str:
        if self.owner is not None:
            owner = self.owner(aggregate)
            if owner:
                return owner
        return policy_owner(self.model, aggregate.state)

    def repairs_for(self, aggregate: StateMachine) -> list[Repair]:
        offered = [r for r in self.repairs if r.applies(aggregate)]
        if self.generic_repairs:
            covered = {r.event_type for r in self.repairs if r.event_type}
            for event_type in aggregate.allowed_events():
                rule = self.model.rule_for(aggregate.state, event_type)
                if rule is not None and rule.custom.get("repair") and event_type not in covered:
                    offered.append(event_repair(self.model, event_type))
        return offered

    def repair(self, aggregate: StateMachine, key: str) -> Repair | None:
        return next((r for r in self.repairs_for(aggregate) if r.key == key), None)


def policy_owner(model: type[StateMachine], state: str) -> str:
    policy = model.WAIT_POLICIES.get(state)
    return policy.owner if policy else ""


def event_repair(
    model: type[StateMachine],
    event_type: str,
    *,
    label: str | None = None,
    form_class: type[RepairForm] = EventPayloadForm,
    payload: Callable[[RepairRequest], dict[str, Any]] | None = None,
) -> Repair:
    """A repair that applies one machine event through the kernel (the generic one, or an app's own
    with a nicer form: pass ``form_class`` and ``payload`` built from its cleaned data)."""
    from workflow import kernel

    def build_payload(req: RepairRequest) -> dict[str, Any]:
        if payload is not None:
            return payload(req)
        return dict(req.data.get("payload") or {})

    def run(req: RepairRequest, dry_run: bool):
        return kernel.apply(
            req.aggregate,
            event_type,
            req.identity,
            build_payload(req),
            actor=req.actor,
            reason=req.reason,
            dry_run=dry_run,
        )

    rule = None
    targets: list[str] = []
    for candidate in model.rules():
        if candidate.name == event_type:
            rule = candidate
            targets = model.possible_targets(candidate)
            break
    description = f"Applies the repair event “{event_type}” → {' or '.join(str(t) for t in targets)}."
    if rule is not None and getattr(model, event_type).__doc__:
        description += " " + getattr(model, event_type).__doc__.strip().splitlines()[0]
    return Repair(
        key=f"event-{event_type}",
        label=label or f"Apply “{event_type}”",
        event_type=event_type,
        preview=lambda req: run(req, True),
        submit=lambda req: run(req, False),
        form_class=form_class,
        description=description,
    )


# --- the registry ---------------------------------------------------------------------------------
_machines: dict[str, ConsoleMachine] = {}


@dataclasses.dataclass
class Page:
    slug: str
    title: str
    view: Callable[[HttpRequest], HttpResponse]


_pages: dict[str, Page] = {}


def register(
    model: type[StateMachine],
    *,
    title=None,
    owner=None,
    current_attempt=None,
    search=None,
    sections: Iterable[Section] = (),
    repairs: Iterable[Repair] = (),
    generic_repairs: bool = True,
    state_classification: dict[str, str] | None = None,
    why=None,
    sql_classification: Iterable[tuple[str, str]] = (),
) -> ConsoleMachine:
    """Register (or extend) the console's knowledge of one machine. Calling it twice merges."""
    entry = _machines.get(model.aggregate_label()) or ConsoleMachine(model=model)
    entry.title = title or entry.title
    entry.owner = owner or entry.owner
    entry.current_attempt = current_attempt or entry.current_attempt
    entry.search = search or entry.search
    entry.why = why or entry.why
    known = {r.key for r in entry.repairs}
    entry.sections.extend(sections)
    entry.repairs.extend(r for r in repairs if r.key not in known)
    entry.generic_repairs = generic_repairs
    valid = {"waiting_normally", "retry_scheduled", "retries_exhausted", "evidence_conflicts"}
    for condition, classification in sql_classification:
        if classification not in valid:
            raise ValueError(f"sql_classification for {model.aggregate_label()}: unknown {classification!r}")
        entry.sql_classification.append((condition, classification))
    if state_classification:
        unknown = {c for c in state_classification.values() if c not in valid} | (
            set(state_classification) - set(model.all_states())
        )
        if unknown:
            raise ValueError(f"state_classification for {model.aggregate_label()}: unknown {sorted(unknown)}")
        entry.state_classification.update(state_classification)
    _machines[model.aggregate_label()] = entry
    return entry


def machine_entry(model: type[StateMachine]) -> ConsoleMachine:
    """The console's entry for a machine (a default one when the app registered nothing)."""
    return _machines.get(model.aggregate_label()) or ConsoleMachine(model=model)


def register_page(slug: str, *, title: str, view: Callable[[HttpRequest], HttpResponse]) -> Page:
    """Fill a console page (e.g. "did-it-print"). The console wraps ``view`` in its login/role check."""
    page = Page(slug, title, view)
    _pages[slug] = page
    return page


def page(slug: str) -> Page | None:
    return _pages.get(slug)


def searchers() -> list[ConsoleMachine]:
    return [entry for entry in _machines.values() if entry.search is not None]

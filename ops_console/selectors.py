"""Reads for the console: the waiting list across every machine, dashboard counts, one aggregate's record.

The waiting list is one SQL statement: a ``UNION ALL`` of one branch per machine (its non-terminal
states), each reading its undelivered outbox work (index ``outbox_aggregate``) and its last classified
event (index ``transition_timeline``) through correlated subqueries. Classification, filters, sorting
and pagination run in the database, so a page costs the same with ten rows or ten million. The SQL is
portable: the same statement runs on PostgreSQL (tests, production) and SQLite (``make run``). Each machine table should
carry an index on ``(state, entered_state_at)`` (the outbox has ``outbox_state_age``); see
docs/console.md for the plans.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from workflow import clock
from workflow.machine import StateMachine, machine_for, machines
from workflow.models import OutboxAttempt, OutboxItem, Result, Timer, Transition
from workflow.selectors import all_history_mismatches

from .registry import REVIEW_STATE, machine_entry

PAGE_SIZE = 50


class Classification:
    WAITING_NORMALLY = "waiting_normally"
    RETRY_SCHEDULED = "retry_scheduled"
    RETRIES_EXHAUSTED = "retries_exhausted"
    EVIDENCE_CONFLICTS = "evidence_conflicts"

    LABELS = {
        WAITING_NORMALLY: "waiting normally",
        RETRY_SCHEDULED: "retry scheduled",
        RETRIES_EXHAUSTED: "automatic retries exhausted",
        EVIDENCE_CONFLICTS: "evidence conflicts",
    }
    ORDER = [EVIDENCE_CONFLICTS, RETRIES_EXHAUSTED, RETRY_SCHEDULED, WAITING_NORMALLY]


EVIDENCE_RESULTS = (Result.NEEDS_REVIEW.value, Result.CONFLICT.value)

SORTS = {
    "age": "entered_state_at ASC, machine ASC, aggregate_id ASC",  # oldest first
    "-age": "entered_state_at DESC, machine ASC, aggregate_id DESC",
    "machine": "machine ASC, state ASC, entered_state_at ASC, aggregate_id ASC",
    "state": "state ASC, entered_state_at ASC, machine ASC, aggregate_id ASC",
    "attempts": "attempts DESC NULLS LAST, entered_state_at ASC, machine ASC, aggregate_id ASC",
    "next_retry": "next_retry ASC NULLS LAST, entered_state_at ASC, machine ASC, aggregate_id ASC",
    "classification": "class_rank ASC, entered_state_at ASC, machine ASC, aggregate_id ASC",
}


@dataclasses.dataclass(frozen=True)
class WaitingFilter:
    machine: str | None = None  # aggregate label, e.g. "orders.order"
    state: str | None = None
    classification: str | None = None
    older_than_seconds: int | None = None
    aggregate_id: int | None = None
    sort: str = "age"


@dataclasses.dataclass
class WaitingRow:
    machine: str
    aggregate_id: int
    state: str
    entered_state_at: datetime
    version: int
    owed: int
    attempts: int | None
    next_retry: datetime | None
    last_error: str
    last_result: str
    hint: str
    classification: str
    title: str = ""
    owner: str = ""
    current_attempt: str = ""
    overdue: bool = False
    age_seconds: float = 0.0

    @property
    def classification_label(self) -> str:
        return Classification.LABELS[self.classification]

    @property
    def machine_name(self) -> str:
        return machine_for(self.machine).MACHINE_NAME or self.machine


@dataclasses.dataclass
class WaitingPage:
    rows: list[WaitingRow]
    total: int
    page: int
    pages: int
    filters: WaitingFilter


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def waiting_states(model: type[StateMachine]) -> list[str]:
    """States the console lists as waiting: every non-terminal state, plus final states that an operator
    can still repair out of (e.g. a print job's ``unknown``: final for automation, open for a human)."""
    return [s for s in model.all_states() if s not in model.TERMINAL_STATES or _repairable(model, s)]


def _repairable(model: type[StateMachine], state: str) -> bool:
    return any(
        (rule := model.rule_for(state, event)) is not None and rule.custom.get("repair")
        for event in model.event_types()
    )


def state_classes(model: type[StateMachine]) -> dict[str, str]:
    """States classified by what they are rather than by owed work: the app's registry mapping, and
    repairable final states (a human must decide: evidence conflicts unless the app says otherwise)."""
    forced = {s: Classification.EVIDENCE_CONFLICTS for s in model.TERMINAL_STATES if _repairable(model, s)}
    forced.update(machine_entry(model).state_classification)
    return forced


def _branch(model: type[StateMachine], flt: WaitingFilter, now: datetime) -> tuple[str, list[Any]] | None:
    states = waiting_states(model)
    if flt.state:
        if flt.state not in states:
            return None
        states = [flt.state]
    if not states:
        return None
    label = model.aggregate_label()
    table = _q(model._meta.db_table)
    outbox = _q(OutboxItem._meta.db_table)
    transitions = _q(Transition._meta.db_table)
    where = [f"a.state IN ({', '.join(['%s'] * len(states))})"]
    where_params: list[Any] = list(states)
    if flt.older_than_seconds:
        where.append("a.entered_state_at < %s")
        # As the ORM writes it (SQLite stores datetimes as naive UTC text and compares them as text).
        where_params.append(connection.ops.adapt_datetimefield_value(now - timedelta(seconds=flt.older_than_seconds)))
    if flt.aggregate_id is not None:
        where.append("a.id = %s")
        where_params.append(flt.aggregate_id)
    # Correlated scalar subqueries rather than LATERAL joins, CASE rather than FILTER, no arrays: one
    # statement for PostgreSQL and for the SQLite of ``make run``. On PostgreSQL each is an index probe
    # per row (``transition_timeline`` backward, ``outbox_aggregate``), and the planner evaluates them
    # only for the rows it returns (a page sorted by age probes 50 records, not the whole waiting set).
    last_result = (
        f"(SELECT t.result FROM {transitions} t WHERE t.aggregate_type = %s "  # noqa: S608 - quoted identifiers and constants; values are parameters
        f"AND t.aggregate_id = a.id ORDER BY t.id DESC LIMIT 1)"
    )
    forced = {k: v for k, v in state_classes(model).items() if k in states}
    conditions = machine_entry(model).sql_classification
    if forced or conditions:
        # The app's classification, as its rank (Classification.ORDER); NULL: decided by owed work.
        whens = [f"WHEN ({condition}) THEN %s" for condition, _ in conditions]
        whens += ["WHEN a.state = %s THEN %s" for _ in forced]
        forced_sql = "CASE " + " ".join(whens) + " ELSE NULL END AS forced_rank"
        forced_params: list[Any] = [_rank(c) for _, c in conditions]
        forced_params += [x for state, c in forced.items() for x in (state, _rank(c))]
    else:
        forced_sql, forced_params = "CAST(NULL AS integer) AS forced_rank", []
    if model is OutboxItem:
        # An outbox item is its own owed work: its attempts, next retry and last error.
        sql = f"""
            SELECT %s AS machine, {forced_sql}, a.id AS aggregate_id, a.state, a.entered_state_at,
                   a.state_version, 1 AS owed, a.attempts AS attempts,
                   CASE WHEN a.state = 'retry_scheduled' THEN a.next_attempt_at END AS next_retry,
                   a.last_error AS last_error,
                   CASE WHEN a.state = 'dead' THEN 1 ELSE 0 END AS has_dead,
                   CASE WHEN a.state = 'retry_scheduled' THEN 1 ELSE 0 END AS has_retry,
                   {last_result} AS last_result, a.effect_type AS hint
            FROM {table} a
            WHERE {" AND ".join(where)}"""  # noqa: S608
        return sql, [label, *forced_params, label, *where_params]
    # Owed work: this record's undelivered outbox items (a handful each). Every aggregate reads the same
    # rows (CASE inside the aggregate, no state condition), so each probe is one ``outbox_aggregate`` scan.
    owed = f"FROM {outbox} o WHERE o.aggregate_type = %s AND o.aggregate_id = a.id AND o.state <> 'delivered'"
    sql = f"""
        SELECT %s AS machine, {forced_sql}, a.id AS aggregate_id, a.state, a.entered_state_at, a.state_version,
               (SELECT count(*) {owed}) AS owed,
               (SELECT max(o.attempts) {owed}) AS attempts,
               (SELECT min(CASE WHEN o.state = 'retry_scheduled' THEN o.next_attempt_at END) {owed}) AS next_retry,
               COALESCE((SELECT o.last_error {owed} AND o.last_error <> ''
                         ORDER BY o.updated_at DESC, o.id DESC LIMIT 1), '') AS last_error,
               COALESCE((SELECT max(CASE WHEN o.state = 'dead' THEN 1 ELSE 0 END) {owed}), 0) AS has_dead,
               COALESCE((SELECT max(CASE WHEN o.state = 'retry_scheduled' THEN 1 ELSE 0 END) {owed}), 0)
                   AS has_retry,
               {last_result} AS last_result, '' AS hint
        FROM {table} a
        WHERE {" AND ".join(where)}"""  # noqa: S608
    return sql, [label, *forced_params, *[label] * 6, label, *where_params]


def _rank(classification: str) -> int:
    return Classification.ORDER.index(classification)


def _classified_sql(flt: WaitingFilter, now: datetime) -> tuple[str, list[Any]] | None:
    """Every waiting record with ``class_rank``: its classification's index in ``Classification.ORDER``
    (a number, so the one CASE serves the label, the filter and the sort)."""
    branches: list[str] = []
    params: list[Any] = []
    for model in machines():
        if flt.machine and model.aggregate_label() != flt.machine:
            continue
        branch = _branch(model, flt, now)
        if branch is None:
            continue
        branches.append(branch[0])
        params.extend(branch[1])
    if not branches:
        return None
    union = "\nUNION ALL\n".join(branches)  # no parentheses around the members: SQLite refuses them
    rank = {c: _rank(c) for c in Classification.ORDER}
    sql = f"""
        SELECT * FROM (
            SELECT w.machine, w.aggregate_id, w.state, w.entered_state_at, w.state_version, w.owed, w.attempts,
                   w.next_retry, w.last_error, w.last_result, w.hint, CASE
                WHEN w.state = %s OR w.last_result IN (%s, %s) THEN {rank[Classification.EVIDENCE_CONFLICTS]}
                ELSE COALESCE(w.forced_rank, CASE
                    WHEN w.has_dead = 1 THEN {rank[Classification.RETRIES_EXHAUSTED]}
                    WHEN w.has_retry = 1 THEN {rank[Classification.RETRY_SCHEDULED]}
                    ELSE {rank[Classification.WAITING_NORMALLY]} END) END AS class_rank
            FROM ({union}) w
        ) c"""  # noqa: S608
    params = [REVIEW_STATE, *EVIDENCE_RESULTS, *params]
    if flt.classification:
        sql += " WHERE class_rank = %s"
        params.append(rank.get(flt.classification, -1))
    return sql, params


def waiting_sql(flt: WaitingFilter, *, page: int = 1, page_size: int = PAGE_SIZE) -> tuple[str, list[Any]] | None:
    """The page query (exposed for EXPLAIN in tests and docs)."""
    base = _classified_sql(flt, clock.now())
    if base is None:
        return None
    sql, params = base
    order = SORTS.get(flt.sort, SORTS["age"])
    return f"{sql} ORDER BY {order} LIMIT %s OFFSET %s", [*params, page_size, (page - 1) * page_size]


def waiting_list(flt: WaitingFilter, *, page: int = 1, page_size: int = PAGE_SIZE) -> WaitingPage:
    now = clock.now()
    base = _classified_sql(flt, now)
    if base is None:
        return WaitingPage([], 0, 1, 1, flt)
    sql, params = base
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM ({sql}) counted", params)  # noqa: S608 - quoted identifiers and constants; values are parameters
        total = cursor.fetchone()[0]
        pages = max(1, -(-total // page_size))
        page = min(max(1, page), pages)
        order = SORTS.get(flt.sort, SORTS["age"])
        cursor.execute(f"{sql} ORDER BY {order} LIMIT %s OFFSET %s", [*params, page_size, (page - 1) * page_size])
        columns = [c[0] for c in cursor.description]
        raw = [dict(zip(columns, r, strict=True)) for r in cursor.fetchall()]
    rows = [
        WaitingRow(
            machine=r["machine"],
            aggregate_id=r["aggregate_id"],
            state=r["state"],
            entered_state_at=_datetime(r["entered_state_at"]),
            version=r["state_version"],
            owed=r["owed"],
            attempts=r["attempts"],
            next_retry=_datetime(r["next_retry"]),
            last_error=r["last_error"] or "",
            last_result=r["last_result"] or "",
            hint=r["hint"] or "",
            classification=Classification.ORDER[r["class_rank"]],
        )
        for r in raw
    ]
    _decorate(rows, now)
    return WaitingPage(rows, total, page, pages, flt)


def _datetime(value: datetime | str | None) -> datetime | None:
    """A datetime column of the raw waiting-list query: PostgreSQL gives an aware datetime; SQLite the
    naive UTC text the ORM stored (no column type survives a UNION, so no converter runs)."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is not None and timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    return value


def _decorate(rows: list[WaitingRow], now: datetime) -> None:
    """Titles, owners, current attempts and overdue flags: per page, one in_bulk per machine."""
    by_machine: dict[str, list[WaitingRow]] = {}
    for row in rows:
        by_machine.setdefault(row.machine, []).append(row)
    for label, machine_rows in by_machine.items():
        model = machine_for(label)
        entry = machine_entry(model)
        objects = model.objects.in_bulk([r.aggregate_id for r in machine_rows])
        for row in machine_rows:
            row.age_seconds = (now - row.entered_state_at).total_seconds()
            policy = model.WAIT_POLICIES.get(row.state)
            limit = policy.overdue_after_seconds if policy else None
            row.overdue = limit is not None and row.age_seconds >= limit
            aggregate = objects.get(row.aggregate_id)
            if aggregate is None:
                continue
            row.title = entry.title_of(aggregate) or row.hint
            row.owner = entry.owner_of(aggregate)
            if entry.current_attempt is not None:
                row.current_attempt = entry.current_attempt(aggregate) or ""


def classification_counts() -> dict[str, int]:
    base = _classified_sql(WaitingFilter(), clock.now())
    counts = dict.fromkeys(Classification.ORDER, 0)
    if base is None:
        return counts
    sql, params = base
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT class_rank, count(*) FROM ({sql}) c GROUP BY class_rank", params)  # noqa: S608 - quoted identifiers and constants; values are parameters
        counts.update({Classification.ORDER[rank]: n for rank, n in cursor.fetchall()})
    return counts


# --- dashboard ----------------------------------------------------------------------------------
@dataclasses.dataclass
class StateCount:
    state: str
    count: int
    terminal: bool
    oldest_id: int | None = None
    oldest_entered_at: datetime | None = None
    overdue_after: int | None = None
    owner: str = ""
    repairable_final: bool = False  # final for automation; an operator repairs out of it

    @property
    def oldest_age_seconds(self) -> float | None:
        if self.oldest_entered_at is None:
            return None
        return (clock.now() - self.oldest_entered_at).total_seconds()

    @property
    def oldest_overdue(self) -> bool:
        age = self.oldest_age_seconds
        return age is not None and self.overdue_after is not None and age >= self.overdue_after


@dataclasses.dataclass
class MachineSummary:
    label: str
    name: str
    states: list[StateCount]

    @property
    def total(self) -> int:
        return sum(s.count for s in self.states)

    @property
    def waiting(self) -> int:
        return sum(s.count for s in self.states if not s.terminal)


def machine_summaries() -> list[MachineSummary]:
    """Counts per machine and state; for each non-terminal state its oldest aggregate
    (``ORDER BY entered_state_at LIMIT 1`` per state: an index range scan on (state, entered_state_at))."""
    out = []
    for model in sorted(machines(), key=lambda m: m.aggregate_label()):
        counts = dict(model.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
        states = []
        waiting = waiting_states(model)
        for state in model.all_states():
            terminal = state in model.TERMINAL_STATES and state not in waiting
            policy = model.WAIT_POLICIES.get(state)
            item = StateCount(
                state=state,
                count=counts.get(state, 0),
                terminal=terminal,
                overdue_after=policy.overdue_after_seconds if policy else None,
                owner=policy.owner if policy else "operators",
                repairable_final=state in model.TERMINAL_STATES and state in waiting,
            )
            if state in waiting and item.count:
                oldest = (
                    model.objects.filter(state=state)
                    .order_by("entered_state_at", "id")
                    .values("id", "entered_state_at")
                    .first()
                )
                if oldest:
                    item.oldest_id, item.oldest_entered_at = oldest["id"], oldest["entered_state_at"]
            states.append(item)
        out.append(MachineSummary(model.aggregate_label(), model.MACHINE_NAME or model.aggregate_label(), states))
    return out


def outbox_summary() -> dict[str, Any]:
    counts = dict(OutboxItem.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
    return {
        "pending": counts.get(OutboxItem.State.PENDING, 0),
        "retry_scheduled": counts.get(OutboxItem.State.RETRY_SCHEDULED, 0),
        "dead": counts.get(OutboxItem.State.DEAD, 0),
        "undelivered": sum(counts.get(s, 0) for s in ("pending", "retry_scheduled", "dead")),
        "dead_items": list(
            OutboxItem.objects.filter(state=OutboxItem.State.DEAD).order_by("entered_state_at", "id")[:10]
        ),
    }


def dead_items(*, effect_type: str | None = None):
    items = OutboxItem.objects.filter(state=OutboxItem.State.DEAD)
    if effect_type:
        items = items.filter(effect_type=effect_type)
    return items.order_by("entered_state_at", "id")


def dead_effect_types() -> list[str]:
    return list(
        OutboxItem.objects.filter(state=OutboxItem.State.DEAD)
        .order_by("effect_type")
        .values_list("effect_type", flat=True)
        .distinct()
    )


def history_mismatches(limit_per_machine: int = 50):
    return all_history_mismatches(limit_per_machine=limit_per_machine)


def recent_rejections(limit: int = 15):
    """The latest events the kernel refused or flagged (stale, illegal, conflict, needs_review)."""
    return list(Transition.objects.exclude(result__in=[Result.APPLIED, Result.ALREADY_APPLIED]).order_by("-id")[:limit])


# --- one aggregate --------------------------------------------------------------------------------
def aggregate_outbox(aggregate: StateMachine):
    items = list(
        OutboxItem.objects.filter(aggregate_type=aggregate.aggregate_label(), aggregate_id=aggregate.pk).order_by("id")
    )
    attempts: dict[int, list[OutboxAttempt]] = {}
    for attempt in OutboxAttempt.objects.filter(item__in=items).order_by("item_id", "number"):
        attempts.setdefault(attempt.item_id, []).append(attempt)
    # Operator records on the items (requeues with actor and reason) show on the owner's page too.
    repairs: dict[int, list[Transition]] = {}
    for row in (
        Transition.objects.filter(aggregate_type=OutboxItem.aggregate_label(), aggregate_id__in=[i.pk for i in items])
        .exclude(reason="")
        .order_by("id")
    ):
        repairs.setdefault(row.aggregate_id, []).append(row)
    for item in items:
        item.attempt_rows = attempts.get(item.pk, [])
        item.repair_rows = repairs.get(item.pk, [])
    return items


def aggregate_timers(aggregate: StateMachine):
    return list(
        Timer.objects.filter(aggregate_type=aggregate.aggregate_label(), aggregate_id=aggregate.pk).order_by(
            "scheduled_at", "id"
        )
    )


def aggregate_timeline(aggregate: StateMachine):
    return list(
        Transition.objects.filter(aggregate_type=aggregate.aggregate_label(), aggregate_id=aggregate.pk).order_by("id")
    )


def aggregate_classification(aggregate: StateMachine) -> WaitingRow | None:
    """This aggregate's row of the waiting list (None when it is in a terminal state)."""
    page = waiting_list(WaitingFilter(machine=aggregate.aggregate_label(), aggregate_id=aggregate.pk))
    return page.rows[0] if page.rows else None


def explain(
    aggregate: StateMachine,
    row: WaitingRow | None,
    timeline: list[Transition],
    outbox_items: list[OutboxItem],
) -> str:
    """One sentence for support: why the record is where it is, from the same facts as the waiting list
    (plus the app's own words when it registered ``why``)."""
    text = _explain(aggregate, row, timeline, outbox_items)
    entry = machine_entry(type(aggregate))
    extra = entry.why(aggregate) if entry.why is not None else None
    return f"{text} {extra.strip()}" if extra and extra.strip() else text


def _explain(
    aggregate: StateMachine,
    row: WaitingRow | None,
    timeline: list[Transition],
    outbox_items: list[OutboxItem],
) -> str:
    if row is None:
        return f"Finished: {aggregate.state} is a final state."
    model = type(aggregate)
    policy = model.WAIT_POLICIES.get(aggregate.state)
    if row.classification == Classification.EVIDENCE_CONFLICTS:
        flagged = next((t for t in reversed(timeline) if t.result in EVIDENCE_RESULTS), None)
        text = "Evidence conflicts: "
        if aggregate.state == REVIEW_STATE:
            text += "it is in manual review and waits for an operator. "
        elif aggregate.state in state_classes(model):
            text += f"“{aggregate.state}” needs an operator's decision. {policy.note if policy else ''} "
        if flagged is not None:
            text += (
                f"Event “{flagged.event_type}” from {flagged.actor or 'unknown'} was classified "
                f"{flagged.result}: {flagged.detail or 'no detail'}."
            )
        return text.strip()
    if isinstance(aggregate, OutboxItem):
        own = [aggregate]
    else:
        own = [i for i in outbox_items if i.state != OutboxItem.State.DELIVERED]
    if row.classification == Classification.RETRIES_EXHAUSTED:
        dead = next((i for i in own if i.state == OutboxItem.State.DEAD), None)
        if dead is not None:
            return (
                f"Automatic retries exhausted: “{dead.effect_type}” (outbox #{dead.pk}) failed "
                f"{dead.attempts} time(s) and stopped; an operator must requeue it or repair the record. "
                f"Last error: {dead.last_error.splitlines()[0] if dead.last_error else 'none recorded'}"
            )
        note = policy.note if policy and policy.note else "an operator must act"
        return f"Automatic retries exhausted ({aggregate.state}): {note}."
    if row.classification == Classification.RETRY_SCHEDULED:
        retrying = next((i for i in own if i.state == OutboxItem.State.RETRY_SCHEDULED), None)
        if retrying is not None:
            return (
                f"Retry scheduled: “{retrying.effect_type}” (outbox #{retrying.pk}) failed "
                f"{retrying.attempts} time(s); the next automatic attempt is at "
                f"{retrying.next_attempt_at:%Y-%m-%d %H:%M:%S %Z}. Nothing to do unless it keeps failing."
            )
    waiting_on = row.owner or (policy.owner if policy else "")
    text = f"Waiting normally on {waiting_on}."
    if policy is not None and policy.note:
        text += f" {policy.note[0].upper()}{policy.note[1:].rstrip('.')}."
    if policy is not None and policy.timer_event:
        text += f" If nothing happens, the timer “{policy.timer_event}” moves it on."
    if row.overdue:
        text += " It has waited longer than its policy allows: escalate to the owner."
    return text


def find(query: str) -> list[tuple[type[StateMachine], StateMachine]]:
    """Aggregates matching a search: an id (in every machine), ``label:id`` / ``name #id``, or an app's
    own business-reference search registered in the console registry."""
    from .registry import searchers

    query = query.strip()
    found: list[tuple[type[StateMachine], StateMachine]] = []
    if not query:
        return found
    candidates = machines()
    raw_id = query
    for sep in (":", "#", "/"):
        if sep in query:
            prefix, raw_id = query.rsplit(sep, 1)
            prefix = prefix.strip().lower()
            candidates = [
                m
                for m in machines()
                if prefix in (m.aggregate_label(), (m.MACHINE_NAME or "").lower(), m._meta.model_name)
            ]
            break
    raw_id = raw_id.strip()
    if raw_id.isdigit():
        for model in candidates:
            obj = model.objects.filter(pk=int(raw_id)).first()
            if obj is not None:
                found.append((model, obj))
    seen = {(m.aggregate_label(), o.pk) for m, o in found}
    for entry in searchers():
        for obj in list(entry.search(query))[:50]:
            key = (entry.model.aggregate_label(), obj.pk)
            if key not in seen:
                seen.add(key)
                found.append((entry.model, obj))
    return found

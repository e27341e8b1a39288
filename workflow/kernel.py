"""The command boundary: ``apply`` is the only way any aggregate changes state.

Inside one database transaction ``apply`` locks and loads the aggregate, answers a known event
identity from its record, finds the rule for (state, event type), judges the rule's guards, runs the
rule, appends the transition record, inserts promised outbox work and timers, and writes the new state
with ``UPDATE … WHERE id = ? AND state_version = ?``. If that update misses, the transaction is rolled
back and the event is classified again against the reloaded row. Every answer is one of six results
and is recorded with the event identity (rejections too), so a replay gets the same answer.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, models, transaction
from django.utils.dateparse import parse_datetime

from . import clock
from .errors import NotFound, ValidationFailed
from .machine import StateMachine
from .models import STATE_CHANGING_RESULTS, OutboxItem, Result, Timer, Transition

logger = logging.getLogger(__name__)

MAX_RACE_RETRIES = 5
TIMER_PAYLOAD_KEY = "__timer__"
CREATED_EVENT = "created"


@dataclasses.dataclass
class Outcome:
    """What ``apply`` answers. ``as_dict`` is the contract's event-style body."""

    result: str
    state: str
    version: int
    transition_id: int | None
    replayed: bool
    detail: str
    from_state: str = ""
    aggregate: StateMachine | None = dataclasses.field(default=None, repr=False)
    effect_keys: list[str] = dataclasses.field(default_factory=list)
    dry_run: bool = False

    def __post_init__(self) -> None:
        # Plain strings (not TextChoices members) so the answer serialises and compares simply.
        self.result = str(self.result)
        self.state = str(self.state)
        self.from_state = str(self.from_state)

    @property
    def changed_state(self) -> bool:
        return self.result in STATE_CHANGING_RESULTS and not self.replayed

    @property
    def accepted(self) -> bool:
        """Applied now or before: the caller's intent is (or already was) in effect."""
        return self.result in (Result.APPLIED, Result.ALREADY_APPLIED)

    def as_dict(self) -> dict[str, Any]:
        return {
            "result": self.result,
            "state": self.state,
            "version": self.version,
            "transition_id": self.transition_id,
            "replayed": self.replayed,
            "detail": self.detail,
        }


class Rejected(Exception):  # noqa: N818 - it is an answer, not an error
    """Raised by a rule method when a fact it reads makes the event ``stale``/``illegal``/``needs_review``."""

    def __init__(self, result: str, detail: str) -> None:
        super().__init__(detail)
        self.result = result
        self.detail = detail


@dataclasses.dataclass
class PromisedEffect:
    effect_type: str
    effect_key: str
    payload: dict[str, Any]
    max_attempts: int | None
    not_before: datetime | None


@dataclasses.dataclass
class PromisedTimer:
    timer_type: str
    fire_at: datetime
    payload: dict[str, Any]


class EventContext:
    """What a rule sees and may do while it runs inside ``apply``."""

    def __init__(self, aggregate: StateMachine, event_type: str, identity: str, payload: dict[str, Any],
                 actor: str, reason: str, now: datetime, dry_run: bool) -> None:
        self.aggregate = aggregate
        self.event_type = event_type
        self.identity = identity
        self.payload = payload
        self.actor = actor
        self.reason = reason
        self.now = now
        self.dry_run = dry_run
        self.guard_cache: dict[Any, bool] = {}
        self.effects: list[PromisedEffect] = []
        self.timers: list[PromisedTimer] = []
        self.result: str = Result.APPLIED
        self.detail: str = ""

    # --- promises -----------------------------------------------------------------------------
    def emit(self, effect_type: str, *, key: str, payload: dict[str, Any] | None = None,
             max_attempts: int | None = None, not_before: datetime | None = None) -> str:
        """Promise outside work. ``key`` must be stable: the same fact must always yield the same key."""
        if not key or len(key) > 255:
            raise ValueError("effect key must be 1..255 characters")
        self.effects.append(PromisedEffect(effect_type, key, payload or {}, max_attempts, not_before))
        return key

    def schedule(self, timer_type: str, *, at: datetime, payload: dict[str, Any] | None = None) -> None:
        """Arm a timer that fires ``timer_type`` at ``at`` while the aggregate stays in the state entered now."""
        self.timers.append(PromisedTimer(timer_type, at, payload or {}))

    # --- classification -----------------------------------------------------------------------
    def needs_review(self, detail: str) -> None:
        """Mark the applied transition as evidence needing review (the rule routes to manual_review)."""
        self.result = Result.NEEDS_REVIEW
        self.detail = detail

    def reject(self, result: str, detail: str) -> Rejected:
        return Rejected(result, detail)

    def note(self, detail: str) -> None:
        self.detail = detail

    @staticmethod
    def parse_time(value: str | datetime) -> datetime:
        if isinstance(value, datetime):
            return value
        parsed = parse_datetime(value)
        if parsed is None:
            raise ValueError(f"not a datetime: {value!r}")
        return parsed


class _LostRace(Exception):
    pass


class _DryRunRollback(Exception):
    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


# --- helpers -------------------------------------------------------------------------------------
def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_json_default, ensure_ascii=False)


def payload_hash(event_type: str, payload: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json({"type": event_type, "payload": payload}).encode()).hexdigest()


def _snapshot(instance: models.Model) -> dict[str, Any]:
    return {f.attname: copy.deepcopy(instance.__dict__.get(f.attname)) for f in instance._meta.concrete_fields}


_KERNEL_FIELDS = {"state", "state_version", "entered_state_at", "updated_at", "id"}


def _changed_fields(instance: models.Model, before: dict[str, Any]) -> dict[str, Any]:
    changed = {}
    for f in instance._meta.concrete_fields:
        if f.attname in _KERNEL_FIELDS:
            continue
        value = instance.__dict__.get(f.attname)
        if value != before.get(f.attname):
            changed[f.attname] = value
    return changed


def _set_fields(target: models.Model, source: models.Model) -> None:
    """Copy loaded values onto the caller's instance (bypassing the protected state descriptor)."""
    for f in source._meta.concrete_fields:
        target.__dict__[f.attname] = source.__dict__.get(f.attname)


def _history_enabled(model: type[models.Model]) -> bool:
    return getattr(model._meta, "simple_history_manager_attribute", None) is not None


_history_managers: dict[type[models.Model], Any] = {}


def _history_manager(model: type[models.Model]) -> Any:
    # simple-history's descriptor builds a new manager class on every access (~0.3 ms): build it once.
    manager = _history_managers.get(model)
    if manager is None:
        manager = _history_managers[model] = getattr(model, model._meta.simple_history_manager_attribute)
    return manager


def _write_history(aggregate: StateMachine, *, created: bool, actor: str, reason: str, now: datetime) -> None:
    """django-simple-history row for this change, carrying actor and reason (no signals involved)."""
    model = type(aggregate)
    if not _history_enabled(model):
        return
    manager = _history_manager(model)
    attrs = {"history_actor": actor} if hasattr(manager.model, "history_actor") else None
    manager.bulk_history_create([aggregate], update=not created, default_change_reason=reason or "",
                                default_date=now, custom_historical_attrs=attrs)


def _insert_effects(aggregate: StateMachine, effects: list[PromisedEffect], now: datetime) -> list[OutboxItem]:
    if not effects:
        return []
    from .outbox import effect_config

    items = []
    for e in effects:
        config = effect_config(e.effect_type)
        items.append(OutboxItem(
            effect_type=e.effect_type, effect_key=e.effect_key, payload=e.payload,
            aggregate_type=aggregate.aggregate_label(), aggregate_id=aggregate.pk,
            max_attempts=e.max_attempts or config.max_attempts,
            next_attempt_at=e.not_before or now, created_at=now, updated_at=now, entered_state_at=now,
        ))
    # A promise with the same stable key already exists: that promise stands, nothing is doubled.
    from django.db import connection

    if connection.vendor == "postgresql":
        # One statement: the ids of the rows inserted now come back from RETURNING (no second SELECT).
        return _insert_returning(items)
    OutboxItem.objects.bulk_create(items, ignore_conflicts=True)  # SQLite (make run): the portable way
    keys = [i.effect_key for i in items]
    return list(OutboxItem.objects.filter(effect_key__in=keys, created_at=now, state=OutboxItem.State.PENDING))


_OUTBOX_COLUMNS = ("effect_type", "effect_key", "aggregate_type", "aggregate_id", "payload", "attempts",
                   "max_attempts", "next_attempt_at", "last_error", "state", "state_version",
                   "entered_state_at", "created_at", "updated_at")


def _insert_returning(items: list[OutboxItem]) -> list[OutboxItem]:
    from django.db import connection

    # Column names and the table come from this module and the model, never from input.
    row = "(" + ", ".join(["%s::jsonb" if c == "payload" else "%s" for c in _OUTBOX_COLUMNS]) + ")"
    params: list[Any] = []
    for i in items:
        params += [i.effect_type, i.effect_key, i.aggregate_type, i.aggregate_id, canonical_json(i.payload),
                   0, i.max_attempts, i.next_attempt_at, "", OutboxItem.State.PENDING, 1, i.entered_state_at,
                   i.created_at, i.updated_at]
    sql = (f"INSERT INTO {OutboxItem._meta.db_table} ({', '.join(_OUTBOX_COLUMNS)}) VALUES "  # noqa: S608
           f"{', '.join([row] * len(items))} ON CONFLICT (effect_key) DO NOTHING RETURNING id, effect_key")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        inserted = {key: pk for pk, key in cursor.fetchall()}
    for i in items:
        i.pk = inserted.get(i.effect_key)
    return [i for i in items if i.pk is not None]


def _insert_timers(aggregate: StateMachine, timers: list[PromisedTimer], state: str, now: datetime) -> None:
    if not timers:
        return
    # A deadline already past fires at once (never earlier than now). A timer with the same identity
    # that is still scheduled is re-armed for the state entered now (e.g. a print job back in pending
    # keeps its original expiry deadline); one that already fired has scheduled_at < now and cannot
    # collide, so every stay in a state gets a live timer.
    Timer.objects.bulk_create([
        Timer(aggregate_type=aggregate.aggregate_label(), aggregate_id=aggregate.pk, timer_type=t.timer_type,
              scheduled_at=max(t.fire_at, now), armed_state=state, armed_at=now, payload=t.payload)
        for t in timers
    ], update_conflicts=True, unique_fields=["aggregate_type", "aggregate_id", "timer_type", "scheduled_at"],
        update_fields=["armed_state", "armed_at", "payload"])


def _wait_policy_timers(aggregate: StateMachine, state: str, entered_at: datetime) -> list[PromisedTimer]:
    policy = type(aggregate).WAIT_POLICIES.get(state)
    if policy is None or not policy.timer_event:
        return []
    fire_at = policy.fire_at(aggregate, entered_at)
    return [PromisedTimer(policy.timer_event, fire_at, {})] if fire_at else []


def _after_commit_enqueue(items: list[OutboxItem]) -> None:
    if not items:
        return
    from .outbox import enqueue_after_commit

    enqueue_after_commit([i.pk for i in items])


def _normalise_actor(actor: str | None) -> str:
    return (actor or "system")[:150]


# --- creation ----------------------------------------------------------------------------------
def create(model: type[StateMachine], *, actor: str | None = None, reason: str = "",
           identity: str | None = None, payload: dict[str, Any] | None = None,
           effects: list[PromisedEffect] | None = None, **fields: Any) -> StateMachine:
    """Insert an aggregate in its initial state and record that as its first transition (version 1).

    ``fields`` may include ``state`` for machines whose life starts elsewhere than the field default.
    Must be called inside the caller's transaction when it is part of a larger command.
    """
    now = clock.now()
    actor = _normalise_actor(actor)
    with transaction.atomic():
        aggregate = model(**fields, state_version=1, entered_state_at=now, created_at=now, updated_at=now)
        aggregate.save_base(raw=False) if not _history_enabled(model) else aggregate.save_without_historical_record()
        body = payload or {}
        Transition.objects.create(
            aggregate_type=model.aggregate_label(), aggregate_id=aggregate.pk, event_type=CREATED_EVENT,
            event_identity=identity or CREATED_EVENT, payload_hash=payload_hash(CREATED_EVENT, body),
            payload=body, from_state="", to_state=aggregate.state, from_version=0, to_version=1,
            result=Result.APPLIED, actor=actor, reason=reason or "", created_at=now,
        )
        _write_history(aggregate, created=True, actor=actor, reason=reason, now=now)
        items = _insert_effects(aggregate, effects or [], now)
        _insert_timers(aggregate, _wait_policy_timers(aggregate, aggregate.state, now), aggregate.state, now)
        _after_commit_enqueue(items)
    return aggregate


# --- apply -------------------------------------------------------------------------------------
def apply(aggregate: StateMachine | tuple[type[StateMachine], int], event_type: str, event_identity: str,
          payload: dict[str, Any] | None = None, *, actor: str | None = None, reason: str | None = None,
          dry_run: bool = False) -> Outcome:
    """Classify one event against one aggregate; see the module docstring.

    ``aggregate`` is an instance (refreshed in place with the result) or ``(Model, pk)``.
    """
    if isinstance(aggregate, tuple):
        model, pk = aggregate
        caller_instance = None
    else:
        model, pk = type(aggregate), aggregate.pk
        caller_instance = aggregate
    if not event_type or len(event_type) > 64:
        raise ValidationFailed("event type must be 1..64 characters", details={"field": "type"})
    if not event_identity or len(event_identity) > 255:
        raise ValidationFailed("event identity must be 1..255 characters", details={"field": "identity"})
    payload = payload or {}
    if not isinstance(payload, dict):
        raise ValidationFailed("payload must be an object", details={"field": "payload"})
    try:
        digest = payload_hash(event_type, payload)
    except TypeError as exc:
        raise ValidationFailed(f"payload is not JSON: {exc}", details={"field": "payload"})
    actor = _normalise_actor(actor)
    reason = reason or ""

    # A known identity with the same content is answered from its record without locking the aggregate:
    # records are append-only and unique per identity, so the answer cannot change under us.
    replayed, unseen = (None, False) if dry_run else _answer_known_replay(model, pk, event_identity, digest)
    if replayed is not None:
        if caller_instance is not None:
            _set_fields(caller_instance, replayed.aggregate)
        return replayed

    last_error: Exception | None = None
    for attempt in range(MAX_RACE_RETRIES):
        try:
            with transaction.atomic():
                outcome = _apply_once(model, pk, event_type, event_identity, payload, digest,
                                      actor, reason, dry_run, identity_unseen=unseen and attempt == 0)
                if dry_run:
                    raise _DryRunRollback(outcome)
        except _DryRunRollback as rollback:
            outcome = rollback.outcome
        except _LostRace as exc:
            # Someone moved the aggregate after we read it: classify again against the new row.
            last_error = exc
            continue
        except IntegrityError as exc:
            # Only a concurrent recording of this very identity is a race to reclassify; any other
            # constraint a rule breaks is a bug and surfaces as such.
            if not _is_identity_race(exc):
                raise
            last_error = exc
            continue
        if caller_instance is not None and outcome.aggregate is not None and not dry_run:
            _set_fields(caller_instance, outcome.aggregate)
        return outcome
    raise RuntimeError(f"apply gave up after {MAX_RACE_RETRIES} lost races") from last_error


def _answer_known_replay(model: type[StateMachine], pk: int, identity: str,
                         digest: str) -> tuple[Outcome | None, bool]:
    """(the replayed answer or None, whether the identity is unseen so far)."""
    known = (Transition.objects.filter(aggregate_type=model.aggregate_label(), aggregate_id=pk,
                                       event_identity=identity)
             .exclude(result=Result.CONFLICT).only("id", "payload_hash", "result", "detail").first())
    if known is None:
        return None, True
    if known.payload_hash != digest:
        return None, False  # a conflict: the locked path classifies and records it
    try:
        agg = model.objects.get(pk=pk)
    except model.DoesNotExist:
        raise NotFound(f"{model._meta.verbose_name} {pk} not found")
    result = Result.ALREADY_APPLIED if known.result in STATE_CHANGING_RESULTS else known.result
    return Outcome(result=result, state=agg.state, version=agg.state_version, transition_id=known.pk,
                   replayed=True, detail=known.detail, from_state=agg.state, aggregate=agg), False


def _apply_once(model: type[StateMachine], pk: int, event_type: str, identity: str, payload: dict[str, Any],
                digest: str, actor: str, reason: str, dry_run: bool, identity_unseen: bool = False) -> Outcome:
    now = clock.now()
    try:
        agg = model.objects.select_for_update().get(pk=pk)
    except model.DoesNotExist:
        raise NotFound(f"{model._meta.verbose_name} {pk} not found")
    observed_version = agg.state_version
    from_state = agg.state
    agg_type = model.aggregate_label()

    def outcome(result: str, *, transition_id: int | None, replayed: bool = False, detail: str = "",
                effect_keys: list[str] | None = None) -> Outcome:
        return Outcome(result=result, state=agg.state, version=agg.state_version, transition_id=transition_id,
                       replayed=replayed, detail=detail, from_state=from_state, aggregate=agg,
                       effect_keys=effect_keys or [], dry_run=dry_run)

    def record_rejection(result: str, detail: str) -> Outcome:
        transition_id = None
        if not dry_run:
            transition_id = Transition.objects.create(
                aggregate_type=agg_type, aggregate_id=pk, event_type=event_type, event_identity=identity,
                payload_hash=digest, payload=payload, from_state=from_state, to_state=from_state,
                from_version=observed_version, to_version=observed_version, result=result, detail=detail,
                actor=actor, reason=reason, created_at=now,
            ).pk
        return outcome(result, transition_id=transition_id, detail=detail)

    # 1. a known identity is answered from its record. Skipped right after apply() found it unseen: if it
    #    was recorded since, the unique constraint refuses our insert and the retry classifies it here.
    known = None if identity_unseen else (
        Transition.objects.filter(aggregate_type=agg_type, aggregate_id=pk, event_identity=identity)
        .exclude(result=Result.CONFLICT).only("id", "payload_hash", "result", "detail").first())
    if known is not None:
        if known.payload_hash != digest:
            return record_rejection(Result.CONFLICT,
                                    f"identity {identity!r} was already used with different content "
                                    f"(transition {known.pk})")
        if known.result in STATE_CHANGING_RESULTS:
            return outcome(Result.ALREADY_APPLIED, transition_id=known.pk, replayed=True, detail=known.detail)
        return outcome(known.result, transition_id=known.pk, replayed=True, detail=known.detail)

    # 2. a timer for a state already left no longer governs
    timer_meta = payload.get(TIMER_PAYLOAD_KEY)
    if timer_meta:
        armed_at = EventContext.parse_time(timer_meta["armed_at"])
        if agg.state != timer_meta["armed_state"] or agg.entered_state_at > armed_at:
            return record_rejection(Result.STALE, f"timer armed in {timer_meta['armed_state']!r}; "
                                                  f"the aggregate is now {agg.state!r}")

    # 3. the rule for (state, event type)
    rule = model.rule_for(agg.state, event_type)
    if rule is None:
        return record_rejection(Result.ILLEGAL, f"no rule for event {event_type!r} in state {agg.state!r}")
    if rule.custom.get("repair") and (actor == "system" or not reason.strip()):
        raise ValidationFailed(f"{event_type!r} is a repair: it needs an actor and a reason",
                               details={"field": "reason"})

    ctx = EventContext(agg, event_type, identity, payload, actor, reason, now, dry_run)
    agg._wf_ctx = ctx
    try:
        # 4. guards against durable facts; a failing guard says which outcome it means
        for condition in rule.conditions or []:
            if condition(agg):
                continue
            result = getattr(condition, "result", Result.ILLEGAL)
            detail = getattr(condition, "detail", getattr(condition, "__name__", "guard failed"))
            review_rule = model.rule_for(agg.state, model.REVIEW_EVENT) if model.REVIEW_EVENT else None
            if result == Result.NEEDS_REVIEW and review_rule is not None:
                ctx.needs_review(detail)
                rule = review_rule
                break
            return record_rejection(result, detail)

        # 5. run the rule: it derives the next state and the local records
        before = _snapshot(agg)
        try:
            getattr(agg, rule.name)(ctx)
        except Rejected as rejected:
            _restore(agg, before)
            return record_rejection(rejected.result, rejected.detail)
    finally:
        agg.__dict__.pop("_wf_ctx", None)

    to_state = agg.state
    new_version = observed_version + 1
    entered = to_state != from_state
    changed = _changed_fields(agg, before)
    update = {"state": to_state, "state_version": new_version, "updated_at": now, **changed}
    if entered:
        update["entered_state_at"] = now

    if dry_run:
        agg.__dict__.update(state_version=new_version)
        keys = [e.effect_key for e in ctx.effects]
        return Outcome(result=ctx.result, state=to_state, version=new_version, transition_id=None,
                       replayed=False, detail=ctx.detail, from_state=from_state, aggregate=agg,
                       effect_keys=keys, dry_run=True)

    # 6. history, promises, timers, then the versioned write
    transition_row = Transition.objects.create(
        aggregate_type=agg_type, aggregate_id=pk, event_type=event_type, event_identity=identity,
        payload_hash=digest, payload=payload, from_state=from_state, to_state=to_state,
        from_version=observed_version, to_version=new_version, result=ctx.result, detail=ctx.detail,
        actor=actor, reason=reason, created_at=now,
    )
    items = _insert_effects(agg, ctx.effects, now)
    timers = list(ctx.timers)
    if entered:
        timers += _wait_policy_timers(agg, to_state, now)
    _insert_timers(agg, timers, to_state, now)
    rows = model.objects.filter(pk=pk, state_version=observed_version).update(**update)
    if rows != 1:
        raise _LostRace()
    agg.__dict__.update(update)
    _write_history(agg, created=False, actor=actor, reason=reason or f"{event_type} ({identity})", now=now)
    _after_commit_enqueue(items)
    return Outcome(result=ctx.result, state=to_state, version=new_version, transition_id=transition_row.pk,
                   replayed=False, detail=ctx.detail, from_state=from_state, aggregate=agg,
                   effect_keys=[e.effect_key for e in ctx.effects])


def _is_identity_race(exc: IntegrityError) -> bool:
    constraint = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
    if constraint is not None:
        return constraint == "transition_identity_once"
    # SQLite names the columns instead of the constraint.
    return "workflow_transition.event_identity" in str(exc)


def _restore(instance: models.Model, before: dict[str, Any]) -> None:
    instance.__dict__.update(before)


# --- reading the record ------------------------------------------------------------------------
def timeline(aggregate: StateMachine) -> models.QuerySet[Transition]:
    """Every classified event of one aggregate, oldest first (rejections included)."""
    return Transition.objects.filter(aggregate_type=aggregate.aggregate_label(),
                                     aggregate_id=aggregate.pk).order_by("id")


def replay(aggregate: StateMachine) -> tuple[str, int]:
    """Rebuild (state, version) from the transition history alone."""
    model = type(aggregate)
    state = model.state_field().get_default()
    version = 1
    for row in timeline(aggregate).filter(result__in=STATE_CHANGING_RESULTS).order_by("to_version", "id"):
        state, version = row.to_state, row.to_version
    return state, version

"""What every state machine shares: the base model, wait policies, classified guards, the registry.

A machine is a Django model that subclasses ``StateMachine``, declares ``state = FSMField(...,
protected=True)`` and writes its rules as django-fsm-2 ``@transition`` methods. The method's name is
the event type it answers. Each rule method receives the kernel's ``EventContext`` (payload, actor,
clock, and the means to promise outbox work and arm timers). Guards are the transition's
``conditions``; wrap them with ``guard(...)`` to say which outcome a failing guard means.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.db import models
from django.utils import timezone
from django_fsm import FSMFieldMixin, FSMModelMixin

if TYPE_CHECKING:
    from .kernel import EventContext


@dataclasses.dataclass(frozen=True)
class WaitPolicy:
    """How long a non-terminal state may wait, and what happens then.

    Either a timer event moves it on (``timer_event`` fired ``after_seconds`` after entry, or at the
    datetime held in ``deadline_field``), or the state escalates to its ``owner`` after
    ``escalate_after_seconds`` (shown as overdue in the console and the stuck selectors).
    """

    timer_event: str | None = None
    after_seconds: int | None = None
    deadline_field: str | None = None
    escalate_after_seconds: int | None = None
    owner: str = "system"
    note: str = ""

    def __post_init__(self) -> None:
        if self.timer_event is None and self.escalate_after_seconds is None:
            raise ValueError("A wait policy needs a timer event or an escalation")
        if self.timer_event and self.after_seconds is None and self.deadline_field is None:
            raise ValueError("A timer policy needs after_seconds or deadline_field")

    def fire_at(self, aggregate: StateMachine, entered_at: datetime) -> datetime | None:
        if not self.timer_event:
            return None
        if self.deadline_field:
            return getattr(aggregate, self.deadline_field)
        return entered_at + timezone.timedelta(seconds=self.after_seconds)

    @property
    def overdue_after_seconds(self) -> int | None:
        return self.escalate_after_seconds if self.escalate_after_seconds is not None else self.after_seconds


class StateMachine(FSMModelMixin, models.Model):
    """Base of every aggregate the kernel moves. Subclasses declare ``state`` and their rules."""

    MACHINE_NAME: str = ""
    TERMINAL_STATES: frozenset[str] = frozenset()
    WAIT_POLICIES: dict[str, WaitPolicy] = {}
    # Event type used when a guard classifies evidence as needs_review (route to manual_review).
    REVIEW_EVENT: str | None = None

    state_version = models.PositiveIntegerField(default=1)
    entered_state_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True

    def refresh_from_db(self, using=None, fields=None, from_queryset=None) -> None:
        """Reload from the database without toggling the state field's ``protected`` flag.

        django-fsm's FSMModelMixin switches protection off on the *shared* field while it refreshes,
        which races between threads (gunicorn threads, Celery thread pools): another thread's refresh
        can fail with "Direct state modification is not allowed". Copying the loaded values into this
        instance's ``__dict__`` touches nothing shared.
        """
        if from_queryset is None:
            from_queryset = type(self)._base_manager.db_manager(using, hints={"instance": self})
        fresh = from_queryset.get(pk=self.pk)
        wanted = set(fields) if fields is not None else None
        for field in self._meta.concrete_fields:
            if wanted is not None and field.attname not in wanted and field.name not in wanted:
                continue
            self.__dict__[field.attname] = fresh.__dict__.get(field.attname)
            if field.is_relation and field.is_cached(self):
                field.delete_cached_value(self)
        self._state.db = fresh._state.db

    # --- introspection used by the kernel, the tests, the diagrams and the console --------------
    @classmethod
    def aggregate_label(cls) -> str:
        """"app_label.model": how the kernel tables name this machine (their aggregate_type column)."""
        return cls._meta.label_lower

    @classmethod
    def state_field(cls) -> FSMFieldMixin:
        return cls._meta.get_field("state")

    @classmethod
    def all_states(cls) -> list[str]:
        return [value for value, _ in cls.state_field().choices]

    @classmethod
    def rules(cls) -> list:
        """Every django-fsm ``Transition`` (one per source state) of this machine."""
        return list(cls.state_field().get_all_transitions(cls))

    @classmethod
    def event_types(cls) -> list[str]:
        return sorted({t.name for t in cls.rules()})

    @classmethod
    def rule_for(cls, state: str, event_type: str):
        method = getattr(cls, event_type, None)
        meta = getattr(method, "_django_fsm", None)
        if meta is None or meta.field is not cls.state_field() and meta.field != "state":
            return None
        if not meta.has_transition(state):
            return None
        return meta.get_transition(state)

    @classmethod
    def possible_targets(cls, rule) -> list[str]:
        target = rule.target
        if target is None:
            return [rule.source]
        allowed = getattr(target, "allowed_states", None)
        if allowed is not None:
            return list(allowed)
        return [target]

    @classmethod
    def non_terminal_states(cls) -> list[str]:
        return [s for s in cls.all_states() if s not in cls.TERMINAL_STATES]

    def is_terminal(self) -> bool:
        return self.state in self.TERMINAL_STATES

    def allowed_events(self) -> list[str]:
        """Events with a rule from the current state (guards are judged when the event arrives)."""
        return [e for e in self.event_types() if self.rule_for(self.state, e) is not None]


def machines() -> list[type[StateMachine]]:
    """Every concrete machine in the project."""
    return [m for m in apps.get_models() if issubclass(m, StateMachine) and not m._meta.abstract]


def machine_for(aggregate_type: str) -> type[StateMachine]:
    model = apps.get_model(aggregate_type)
    if not issubclass(model, StateMachine):
        raise LookupError(f"{aggregate_type} is not a state machine")
    return model


# --- guards -----------------------------------------------------------------------------------
class GuardCondition:
    """A django-fsm condition that knows which outcome its failure means.

    ``result`` is ``"illegal"`` (default), ``"stale"`` (the event refers to something that no longer
    governs) or ``"needs_review"`` (evidence conflicts with local expectation). The function gets
    ``(aggregate, ctx)``; its answer is cached for the event so django-fsm's own re-check costs nothing.
    """

    def __init__(self, fn: Callable[[Any, EventContext], bool], result: str, detail: str) -> None:
        self.fn = fn
        self.result = result
        self.detail = detail
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__

    def __call__(self, instance: StateMachine) -> bool:
        ctx = getattr(instance, "_wf_ctx", None)
        if ctx is None:  # called outside the kernel (e.g. can_proceed in a shell): no event, no facts
            return False
        cache = ctx.guard_cache
        if self not in cache:
            cache[self] = bool(self.fn(instance, ctx))
        return cache[self]


def guard(result: str = "illegal", detail: str | None = None) -> Callable[[Callable], GuardCondition]:
    def decorate(fn: Callable[[Any, EventContext], bool]) -> GuardCondition:
        return GuardCondition(fn, result, detail or (fn.__doc__ or fn.__name__).strip().splitlines()[0])

    return decorate


def iter_conditions(rule) -> Iterable:
    return rule.conditions or []

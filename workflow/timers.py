"""Timers as events: a due timer is claimed, turned into one ``apply`` call, and marked fired.

Identity is ``(aggregate, timer type, scheduled_at)``. The kernel answers ``stale`` when the
aggregate has left the state the timer was armed in, so a late timer is never permission to act.
"""

from __future__ import annotations

import time

from django.db import transaction

from . import clock
from .errors import NotFound
from .kernel import TIMER_PAYLOAD_KEY, apply
from .machine import machine_for
from .models import Timer

TIMER_ACTOR = "system:timer"


def fire_one(timer_id: int | None = None) -> Timer | None:
    """Fire one due timer (that one, or the earliest due). Returns it, or None when none was claimable."""
    now = clock.now()
    with transaction.atomic():
        due = Timer.objects.select_for_update(skip_locked=True).filter(
            status=Timer.Status.SCHEDULED, scheduled_at__lte=now)
        if timer_id is not None:
            due = due.filter(pk=timer_id)
        timer = due.order_by("scheduled_at", "id").first()
        if timer is None:
            return None
        payload = dict(timer.payload)
        payload[TIMER_PAYLOAD_KEY] = {"armed_state": timer.armed_state, "armed_at": timer.armed_at.isoformat(),
                                      "scheduled_at": timer.scheduled_at.isoformat()}
        model = machine_for(timer.aggregate_type)
        try:
            result = apply((model, timer.aggregate_id), timer.timer_type, timer.identity, payload,
                           actor=TIMER_ACTOR).result
        except NotFound:
            result = "orphaned"  # the aggregate is gone; nothing to act on, and never again
        Timer.objects.filter(pk=timer.pk).update(status=Timer.Status.FIRED, fired_at=now, result=result)
        timer.status, timer.fired_at, timer.result = Timer.Status.FIRED, now, result
        return timer


def fire_due(*, limit: int = 1000, time_budget_seconds: float = 20.0) -> list[Timer]:
    fired: list[Timer] = []
    deadline = time.monotonic() + time_budget_seconds
    while len(fired) < limit and time.monotonic() < deadline:
        timer = fire_one()
        if timer is None:
            break
        fired.append(timer)
    return fired


def pending_timers(aggregate) -> list[Timer]:
    return list(Timer.objects.filter(aggregate_type=aggregate.aggregate_label(), aggregate_id=aggregate.pk,
                                     status=Timer.Status.SCHEDULED).order_by("scheduled_at"))

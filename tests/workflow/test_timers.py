"""Timers are events: armed by wait policies, fired once through apply, stale once their state is left."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.kernel_app.models import Parcel
from workflow import clock, kernel, tasks, timers
from workflow.models import Timer, Transition

pytestmark = pytest.mark.django_db


def test_entering_a_state_arms_its_wait_policy_timer():
    parcel = kernel.create(Parcel, actor="t", address="A")
    [timer] = timers.pending_timers(parcel)
    assert (timer.timer_type, timer.armed_state) == ("abandon", "created")
    assert timer.scheduled_at == parcel.entered_state_at + timedelta(seconds=3600)
    assert timer.identity == f"timer:abandon:{timer.scheduled_at.isoformat()}"


def test_due_timer_fires_once_through_apply():
    parcel = kernel.create(Parcel, actor="t", address="A")
    assert timers.fire_due() == []  # not due yet

    with clock.travel(3601):
        fired = timers.fire_due()
        assert timers.fire_due() == []  # and never twice

    assert [(t.timer_type, t.result) for t in fired] == [("abandon", "applied")]
    parcel.refresh_from_db()
    assert parcel.state == "cancelled"
    row = Transition.objects.get(aggregate_id=parcel.pk, event_type="abandon")
    assert (row.actor, row.event_identity, row.result) == ("system:timer", fired[0].identity, "applied")


def test_timer_for_a_state_already_left_is_stale_and_changes_nothing():
    parcel = kernel.create(Parcel, actor="t", address="A")
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})

    with clock.travel(3601):
        [timer] = timers.fire_due()

    assert timer.result == "stale"
    parcel.refresh_from_db()
    assert (parcel.state, parcel.state_version) == ("packed", 2)
    row = Transition.objects.get(aggregate_id=parcel.pk, event_type="abandon")
    assert row.result == "stale" and "armed in 'created'" in row.detail


def test_timer_armed_before_leaving_and_reentering_a_state_is_stale():
    """A timer armed during an earlier stay in the same state (with its own deadline) no longer governs."""
    parcel = kernel.create(Parcel, actor="t", address="A")
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})
    kernel.apply(parcel, "ship", "e2", {"weight_grams": 5, "booking": "b1"})
    earlier_stay = Timer.objects.create(aggregate_type="kernel_app.parcel", aggregate_id=parcel.pk,
                                        timer_type="lost_in_transit", scheduled_at=clock.now() + timedelta(hours=1),
                                        armed_state="shipped", armed_at=clock.now())
    kernel.apply(parcel, "route_to_review", "e3", {})
    with clock.travel(60):
        kernel.apply(parcel, "resolve", "e4", {"decision": "ship"}, actor="op", reason="found it")  # shipped again

    with clock.travel(3600 + 30):  # the earlier stay's timer is due; the current stay's deadline is not
        fired = timers.fire_due()

    assert [(t.pk, t.result) for t in fired if t.timer_type == "lost_in_transit"] == [(earlier_stay.pk, "stale")]
    parcel.refresh_from_db()
    assert parcel.state == "shipped"


def test_celery_sweep_task_fires_due_timers():
    parcel = kernel.create(Parcel, actor="t", address="A")
    with clock.travel(3601):
        assert tasks.sweep_timers() == 1
    assert Timer.objects.get(aggregate_id=parcel.pk).status == "fired"


def test_reentering_a_state_with_the_same_deadline_rearms_the_scheduled_timer():
    """A deadline that does not move (the parcel's deliver_by, like a print job's expires_at) must govern
    every stay in the state, not only the first."""
    parcel = kernel.create(Parcel, actor="t", address="A")
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})
    kernel.apply(parcel, "ship", "e2", {"weight_grams": 5, "booking": "b1"})
    [check] = [t for t in timers.pending_timers(parcel) if t.timer_type == "lost_in_transit"]
    assert check.scheduled_at == parcel.deliver_by
    kernel.apply(parcel, "route_to_review", "e3", {})
    with clock.travel(60):  # back in 'shipped' a minute later, same deadline, same timer identity
        kernel.apply(parcel, "resolve", "e4", {"decision": "ship"}, actor="op", reason="found it")
    [rearmed] = [t for t in timers.pending_timers(parcel) if t.timer_type == "lost_in_transit"]
    assert (rearmed.pk, rearmed.armed_state) == (check.pk, "shipped")
    assert rearmed.armed_at > check.armed_at

    with clock.travel(86400 + 5):
        fired = [t for t in timers.fire_due() if t.timer_type == "lost_in_transit"]

    assert [(t.pk, t.result) for t in fired] == [(check.pk, "applied")]
    parcel.refresh_from_db()
    assert parcel.state == "manual_review"

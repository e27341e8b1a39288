"""The command boundary's contract: six outcomes, stable replays, conflicts, dry runs, races,
append-only history, replay of history, simple-history rows with actor and reason."""

from __future__ import annotations

import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction

from tests.kernel_app.models import Parcel
from workflow import kernel
from workflow.errors import NotFound, ValidationFailed
from workflow.models import OutboxItem, Timer, Transition
from workflow.selectors import history_mismatches

pytestmark = pytest.mark.django_db


def new_parcel(**fields) -> Parcel:
    fields.setdefault("address", "1 Test Street")
    return kernel.create(Parcel, actor="test", **fields)


def counts() -> tuple[int, int, int, int]:
    return (Transition.objects.count(), OutboxItem.objects.count(), Timer.objects.count(),
            Parcel.history.count())


def test_applied_moves_state_records_transition_and_promises_effect():
    parcel = new_parcel()

    outcome = kernel.apply(parcel, "pack", "evt-1", {"weight_grams": 750}, actor="warehouse:7", reason="packed")

    assert outcome.as_dict() == {"result": "applied", "state": "packed", "version": 2,
                                 "transition_id": outcome.transition_id, "replayed": False, "detail": ""}
    parcel.refresh_from_db()
    assert (parcel.state, parcel.state_version, parcel.weight_grams) == ("packed", 2, 750)
    row = Transition.objects.get(pk=outcome.transition_id)
    assert (row.event_type, row.event_identity, row.from_state, row.to_state, row.from_version, row.to_version,
            row.actor, row.reason, row.result) == ("pack", "evt-1", "created", "packed", 1, 2, "warehouse:7",
                                                   "packed", "applied")
    item = OutboxItem.objects.get(effect_key=f"parcel:{parcel.pk}:packing-slip")
    assert (item.state, item.aggregate_type, item.aggregate_id) == ("pending", "kernel_app.parcel", parcel.pk)


def test_replay_of_applied_identity_answers_already_applied_and_writes_nothing():
    parcel = new_parcel()
    first = kernel.apply(parcel, "pack", "evt-1", {"weight_grams": 750})
    before = counts()

    again = kernel.apply(parcel, "pack", "evt-1", {"weight_grams": 750})

    assert again.result == "already_applied" and again.replayed
    assert again.transition_id == first.transition_id
    assert (again.state, again.version) == ("packed", 2)
    assert counts() == before


def test_replay_of_rejected_identity_returns_the_same_rejection():
    parcel = new_parcel()
    illegal = kernel.apply(parcel, "deliver", "evt-early", {"booking": "x"})
    assert illegal.result == "illegal" and not illegal.replayed
    kernel.apply(parcel, "pack", "evt-1", {"weight_grams": 10})
    kernel.apply(parcel, "ship", "evt-2", {"weight_grams": 10, "booking": "x"})
    before = counts()

    # Now the event would be legal, but its identity was already classified: the answer is stable.
    again = kernel.apply(parcel, "deliver", "evt-early", {"booking": "x"})

    assert (again.result, again.replayed, again.transition_id) == ("illegal", True, illegal.transition_id)
    assert parcel.state == "shipped"
    assert counts() == before


def test_same_identity_with_different_content_is_a_conflict_and_is_recorded():
    parcel = new_parcel()
    kernel.apply(parcel, "pack", "evt-1", {"weight_grams": 750})

    outcome = kernel.apply(parcel, "pack", "evt-1", {"weight_grams": 999})

    assert outcome.result == "conflict"
    assert parcel.weight_grams == 750 and parcel.state_version == 2
    row = Transition.objects.get(pk=outcome.transition_id)
    assert (row.result, row.event_identity) == ("conflict", "evt-1")
    # and the conflict is stable
    assert kernel.apply(parcel, "pack", "evt-1", {"weight_grams": 999}).result == "conflict"


def test_no_rule_for_state_and_event_is_illegal_and_recorded():
    parcel = new_parcel()
    outcome = kernel.apply(parcel, "deliver", "evt-x", {"booking": "b"})
    assert outcome.result == "illegal"
    assert "no rule" in outcome.detail
    assert Transition.objects.filter(pk=outcome.transition_id, result="illegal").exists()
    assert parcel.state == "created"


def test_guard_failure_is_classified_by_the_guard():
    parcel = new_parcel(address="")
    outcome = kernel.apply(parcel, "pack", "evt-1", {"weight_grams": 5})
    assert (outcome.result, outcome.state) == ("illegal", "created")
    assert outcome.detail == "a parcel needs an address before it can be packed"


def test_stale_guard_rejects_evidence_for_a_superseded_booking():
    parcel = new_parcel()
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})
    kernel.apply(parcel, "ship", "e2", {"weight_grams": 5, "booking": "bk-1"})
    kernel.apply(parcel, "rebook", "e3", {"booking": "bk-2"})

    outcome = kernel.apply(parcel, "deliver", "e4", {"booking": "bk-1"})

    assert (outcome.result, outcome.state) == ("stale", "shipped")
    assert kernel.apply(parcel, "deliver", "e5", {"booking": "bk-2"}).result == "applied"


def test_needs_review_routes_the_aggregate_to_manual_review():
    parcel = new_parcel()
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 500})

    outcome = kernel.apply(parcel, "ship", "e2", {"weight_grams": 501, "booking": "b"})

    assert (outcome.result, outcome.state, outcome.version) == ("needs_review", "manual_review", 3)
    assert "weight" in outcome.detail
    assert parcel.booking == ""  # the ship rule did not run
    assert kernel.apply(parcel, "ship", "e2", {"weight_grams": 501, "booking": "b"}).result == "already_applied"


def test_rule_may_reject_from_inside_without_side_effects():
    parcel = new_parcel()
    outcome = kernel.apply(parcel, "cancel", "c1", {"refuse": True})
    assert (outcome.result, outcome.state, parcel.state_version) == ("illegal", "created", 1)


def test_repair_rule_requires_actor_and_reason_and_records_them():
    parcel = new_parcel()
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 1})
    kernel.apply(parcel, "route_to_review", "e2", {})
    before = counts()

    with pytest.raises(ValidationFailed):
        kernel.apply(parcel, "resolve", "r1", {"decision": "ship"}, actor="operator:ann", reason="  ")
    assert counts() == before

    outcome = kernel.apply(parcel, "resolve", "r1", {"decision": "ship"}, actor="operator:ann",
                           reason="carrier confirmed pickup by phone")
    assert (outcome.result, outcome.state) == ("applied", "shipped")
    row = Transition.objects.get(pk=outcome.transition_id)
    assert (row.actor, row.reason) == ("operator:ann", "carrier confirmed pickup by phone")
    latest = Parcel.history.filter(id=parcel.pk).order_by("-history_id").first()
    assert (latest.state, latest.history_actor, latest.history_change_reason) == (
        "shipped", "operator:ann", "carrier confirmed pickup by phone")


def test_dry_run_answers_without_writing_anything():
    parcel = new_parcel()
    before = counts()

    preview = kernel.apply(parcel, "pack", "evt-1", {"weight_grams": 5}, dry_run=True)

    assert (preview.result, preview.state, preview.version, preview.transition_id) == ("applied", "packed", 2, None)
    assert preview.effect_keys == [f"parcel:{parcel.pk}:packing-slip"]
    assert counts() == before
    assert (parcel.state, parcel.state_version) == ("created", 1)  # the caller's instance is untouched too
    parcel.refresh_from_db()
    assert (parcel.state, parcel.state_version) == ("created", 1)
    # the identity was not consumed by the dry run
    assert kernel.apply(parcel, "pack", "evt-1", {"weight_grams": 5}).result == "applied"


def test_dry_run_of_a_rejection_writes_nothing():
    parcel = new_parcel()
    before = counts()
    assert kernel.apply(parcel, "deliver", "x", {}, dry_run=True).result == "illegal"
    assert counts() == before


def test_effect_keys_are_unique_promises():
    parcel = new_parcel()
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})
    kernel.apply(parcel, "route_to_review", "e2", {})
    kernel.apply(parcel, "resolve", "e3", {"decision": "cancel"}, actor="op", reason="r")
    assert OutboxItem.objects.filter(effect_key=f"parcel:{parcel.pk}:packing-slip").count() == 1


def test_unknown_aggregate_is_not_found():
    with pytest.raises(NotFound):
        kernel.apply((Parcel, 987654), "pack", "e1", {})


def test_bad_event_input_is_refused_before_anything_is_written():
    parcel = new_parcel()
    before = counts()
    for args in [("", "e1", {}), ("pack", "", {}), ("pack", "x" * 256, {}), ("pack", "e1", ["not", "a", "dict"])]:
        with pytest.raises(ValidationFailed):
            kernel.apply(parcel, *args)
    assert counts() == before


def test_simple_history_rows_carry_actor_and_reason():
    parcel = kernel.create(Parcel, actor="api_key:shop", reason="order 7", address="A")
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 5}, actor="warehouse:3", reason="scanned")
    rows = list(Parcel.history.filter(id=parcel.pk).order_by("history_id")
                .values_list("history_type", "state", "state_version", "history_actor", "history_change_reason"))
    assert rows == [("+", "created", 1, "api_key:shop", "order 7"), ("~", "packed", 2, "warehouse:3", "scanned")]


def test_history_replay_rebuilds_state_and_verify_history_passes():
    parcel = new_parcel()
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})
    kernel.apply(parcel, "deliver", "e-bad", {})  # rejected: not part of the replayed chain
    kernel.apply(parcel, "ship", "e2", {"weight_grams": 5, "booking": "b"})
    assert kernel.replay(parcel) == ("shipped", 3)
    assert history_mismatches(Parcel) == []
    call_command("verify_history")


def test_verify_history_reports_a_row_written_behind_the_kernels_back():
    parcel = new_parcel()
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})
    with connection.cursor() as cursor:  # simulate a rogue writer bypassing apply
        cursor.execute("UPDATE kernel_app_parcel SET state = 'delivered' WHERE id = %s", [parcel.pk])

    mismatches = history_mismatches(Parcel)

    assert [(m.aggregate_id, m.row_state, m.replayed_state) for m in mismatches] == [(parcel.pk, "delivered", "packed")]
    with pytest.raises(CommandError):
        call_command("verify_history")


@pytest.mark.parametrize("statement", [
    "UPDATE workflow_transition SET result = 'applied'",
    "DELETE FROM workflow_transition",
])
def test_history_table_refuses_update_and_delete_in_the_database(statement):
    parcel = new_parcel()
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement)
    assert Transition.objects.filter(aggregate_id=parcel.pk).count() == 2


def test_history_rows_cannot_be_changed_through_the_orm_either():
    parcel = new_parcel()
    row = Transition.objects.get(aggregate_id=parcel.pk)
    row.reason = "rewritten"
    with pytest.raises(DatabaseError), transaction.atomic():
        row.save()
    with pytest.raises(DatabaseError), transaction.atomic():
        row.delete()


def test_state_field_cannot_be_assigned_directly():
    parcel = new_parcel()
    with pytest.raises(AttributeError):
        parcel.state = "delivered"


@pytest.mark.django_db(transaction=True)
def test_two_commands_on_the_same_version_commit_exactly_one_transition():
    """Two threads, separate connections, both holding version 2: one wins, the other is reclassified."""
    parcel = new_parcel()
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})
    barrier = threading.Barrier(2)
    outcomes: dict[str, kernel.Outcome] = {}
    errors: list[BaseException] = []

    def run(event: str, payload: dict) -> None:
        try:
            stale_copy = Parcel.objects.get(pk=parcel.pk)
            assert stale_copy.state_version == 2
            barrier.wait()
            outcomes[event] = kernel.apply(stale_copy, event, f"race-{event}", payload)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=("ship", {"weight_grams": 5, "booking": "b"})),
               threading.Thread(target=run, args=("cancel", {}))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    assert not errors, errors
    results = sorted(o.result for o in outcomes.values())
    assert results == ["applied", "illegal"], outcomes
    winner = next(o for o in outcomes.values() if o.result == "applied")
    loser = next(o for o in outcomes.values() if o.result == "illegal")
    parcel.refresh_from_db()
    assert (parcel.state, parcel.state_version) == (winner.state, 3)
    assert loser.state == winner.state  # classified against the winner's state, not the stale copy
    applied_rows = Transition.objects.filter(aggregate_id=parcel.pk, result="applied").count()
    assert applied_rows == 3  # created, pack, and exactly one of ship/cancel
    assert history_mismatches(Parcel) == []


@pytest.mark.django_db(transaction=True)
def test_concurrent_deliveries_of_one_identity_apply_once():
    parcel = new_parcel()
    barrier = threading.Barrier(8)
    results: list[str] = []

    def run() -> None:
        try:
            barrier.wait()
            results.append(kernel.apply((Parcel, parcel.pk), "pack", "same-evt", {"weight_grams": 5}).result)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == ["already_applied"] * 7 + ["applied"]
    assert OutboxItem.objects.filter(aggregate_id=parcel.pk).count() == 1


def test_a_rule_breaking_a_constraint_is_an_error_not_a_retried_race(monkeypatch):
    """IntegrityError is reclassified only for the identity race; a rule's own violation surfaces at once."""
    from django.db import IntegrityError

    parcel = new_parcel()
    tries = []
    real_apply_once = kernel._apply_once
    monkeypatch.setattr(kernel, "_apply_once", lambda *a, **k: tries.append(1) or real_apply_once(*a, **k))

    with pytest.raises(IntegrityError):  # weight_grams is a PositiveIntegerField: CHECK (>= 0) in PostgreSQL
        kernel.apply(parcel, "pack", "e1", {"weight_grams": -5})

    assert tries == [1]
    parcel.refresh_from_db()
    assert (parcel.state, parcel.state_version) == ("created", 1)


@pytest.mark.django_db(transaction=True)
def test_refresh_from_db_is_safe_across_threads():
    """django-fsm's own refresh toggles protection on the shared field; ours must not race."""
    parcels = [new_parcel() for _ in range(4)]
    errors: list[BaseException] = []

    def refresh_many(parcel: Parcel) -> None:
        try:
            for _ in range(200):
                parcel.refresh_from_db()
                parcel.refresh_from_db(fields=["state", "state_version"])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=refresh_many, args=(p,)) for p in parcels]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]
    with pytest.raises(AttributeError):  # and the field is still protected afterwards
        parcels[0].state = "delivered"


@pytest.mark.django_db(transaction=True)
def test_a_replay_is_answered_without_waiting_for_the_aggregates_lock():
    """History is append-only, so a known identity's answer cannot change: no lock is needed."""
    parcel = new_parcel()
    first = kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})
    locked, release = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        try:
            with transaction.atomic():
                Parcel.objects.select_for_update().get(pk=parcel.pk)
                locked.set()
                release.wait(20)
        finally:
            connection.close()

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    try:
        assert locked.wait(10)
        with connection.cursor() as cursor:  # a new write would wait for the lock; a replay must not
            cursor.execute("SET lock_timeout = '2s'")
        replay = kernel.apply((Parcel, parcel.pk), "pack", "e1", {"weight_grams": 5})
    finally:
        release.set()
        holder.join(20)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")
    assert (replay.result, replay.replayed, replay.transition_id) == ("already_applied", True, first.transition_id)

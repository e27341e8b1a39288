"""The waiting list: one row per record not in a final state, classified as waiting normally, retry
scheduled, automatic retries exhausted or evidence conflicts; filters, sorting and pagination in SQL."""

from __future__ import annotations

import dataclasses

import pytest
from django.urls import reverse

from ops_console.selectors import Classification, WaitingFilter, classification_counts, waiting_list
from tests.kernel_app.models import Parcel
from workflow import clock, kernel

from .conftest import make_dead_item, make_parcel, make_retrying_item, make_review_parcel

pytestmark = pytest.mark.django_db

PARCEL = "kernel_app.parcel"
OUTBOX = "workflow.outboxitem"


def row_of(label: str, pk: int):
    rows = waiting_list(WaitingFilter(machine=label, aggregate_id=pk)).rows
    assert len(rows) == 1, rows
    return rows[0]


def test_a_fresh_parcel_is_waiting_normally_with_its_owner():
    parcel = make_parcel()
    row = row_of(PARCEL, parcel.pk)
    assert row.classification == Classification.WAITING_NORMALLY
    assert row.state == "created" and row.owner == "shop" and row.owed == 0 and not row.overdue


def test_owed_work_that_failed_once_is_retry_scheduled():
    parcel = make_parcel()
    item = make_retrying_item(parcel)
    row = row_of(PARCEL, parcel.pk)
    assert row.classification == Classification.RETRY_SCHEDULED
    assert row.owed == 1 and row.attempts == 1 and row.next_retry == item.next_attempt_at
    assert "503 Service Unavailable" in row.last_error
    outbox_row = row_of(OUTBOX, item.pk)
    assert outbox_row.classification == Classification.RETRY_SCHEDULED and outbox_row.owner == "outbox worker"


def test_dead_owed_work_is_retries_exhausted_for_the_item_and_its_owner():
    parcel = make_parcel()
    item = make_dead_item(parcel)
    row = row_of(PARCEL, parcel.pk)
    assert row.classification == Classification.RETRIES_EXHAUSTED
    assert row.attempts == 2 and row.next_retry is None and "503" in row.last_error
    outbox_row = row_of(OUTBOX, item.pk)
    assert outbox_row.classification == Classification.RETRIES_EXHAUSTED and outbox_row.owner == "operators"
    with clock.travel(61):  # (it died under a clock moved by 60s)
        assert row_of(OUTBOX, item.pk).overdue  # dead escalates at once


def test_manual_review_is_evidence_conflicts():
    parcel = make_review_parcel()
    row = row_of(PARCEL, parcel.pk)
    assert row.classification == Classification.EVIDENCE_CONFLICTS
    assert row.state == "manual_review" and row.last_result == "needs_review" and row.owner == "operators"


def test_a_conflicting_event_makes_a_waiting_record_evidence_conflicts():
    parcel = make_parcel()
    kernel.apply(parcel, "pack", "pack-1", {"weight_grams": 500}, actor="warehouse")
    assert row_of(PARCEL, parcel.pk).classification == Classification.WAITING_NORMALLY
    # The same identity re-used with different content: recorded as a conflict.
    assert kernel.apply(parcel, "pack", "pack-1", {"weight_grams": 700}, actor="warehouse").result == "conflict"
    row = row_of(PARCEL, parcel.pk)
    assert row.state == "packed" and row.classification == Classification.EVIDENCE_CONFLICTS


def test_evidence_conflicts_outranks_dead_work():
    parcel = make_review_parcel()
    make_dead_item(parcel)
    assert row_of(PARCEL, parcel.pk).classification == Classification.EVIDENCE_CONFLICTS


def test_final_states_are_not_listed():
    parcel = make_parcel()
    kernel.apply(parcel, "cancel", "c1", {}, actor="shop")
    assert waiting_list(WaitingFilter(machine=PARCEL, aggregate_id=parcel.pk)).rows == []


def test_filters_by_machine_state_classification_and_age():
    fresh = make_parcel()
    review = make_review_parcel()
    dead_item = make_dead_item(make_parcel())
    everything = waiting_list(WaitingFilter())
    listed = {(r.machine, r.aggregate_id) for r in everything.rows}
    assert {(PARCEL, fresh.pk), (PARCEL, review.pk), (OUTBOX, dead_item.pk)} <= listed

    only_review = waiting_list(WaitingFilter(state="manual_review")).rows
    assert [(r.machine, r.aggregate_id) for r in only_review] == [(PARCEL, review.pk)]
    only_outbox = waiting_list(WaitingFilter(machine=OUTBOX)).rows
    assert {r.machine for r in only_outbox} == {OUTBOX}
    exhausted = waiting_list(WaitingFilter(classification=Classification.RETRIES_EXHAUSTED)).rows
    assert {(r.machine, r.aggregate_id) for r in exhausted} == {
        (OUTBOX, dead_item.pk),
        (PARCEL, dead_item.aggregate_id),
    }
    assert waiting_list(WaitingFilter(older_than_seconds=3600)).total == 0
    with clock.travel(7200):
        assert waiting_list(WaitingFilter(older_than_seconds=3600)).total == everything.total

    counts = classification_counts()
    assert counts[Classification.EVIDENCE_CONFLICTS] == 1
    assert counts[Classification.RETRIES_EXHAUSTED] == 2


def test_sorting_and_pagination():
    parcels = [make_parcel() for _ in range(5)]
    oldest_first = waiting_list(WaitingFilter(machine=PARCEL, sort="age"), page_size=2)
    assert oldest_first.total == 5 and oldest_first.pages == 3
    assert [r.aggregate_id for r in oldest_first.rows] == [parcels[0].pk, parcels[1].pk]
    last = waiting_list(WaitingFilter(machine=PARCEL, sort="age"), page=3, page_size=2)
    assert [r.aggregate_id for r in last.rows] == [parcels[4].pk]
    newest_first = waiting_list(WaitingFilter(machine=PARCEL, sort="-age"), page_size=2)
    assert [r.aggregate_id for r in newest_first.rows] == [parcels[4].pk, parcels[3].pk]


def test_overdue_follows_the_wait_policy():
    parcel = make_parcel()
    kernel.apply(parcel, "pack", "pack-1", {"weight_grams": 500}, actor="warehouse")  # escalates after 600s
    assert not row_of(PARCEL, parcel.pk).overdue
    with clock.travel(601):
        assert row_of(PARCEL, parcel.pk).overdue


def test_the_page_shows_each_classification(support_client):
    make_parcel()
    make_review_parcel()
    make_dead_item(make_parcel())
    make_retrying_item(make_parcel())
    html = support_client.get(reverse("console:waiting")).content.decode()
    for label in Classification.LABELS.values():
        assert f">{label}</span>" in html
    filtered = support_client.get(reverse("console:waiting") + "?classification=evidence_conflicts").content.decode()
    assert 'data-classification="evidence_conflicts"' in filtered
    assert 'data-classification="waiting_normally"' not in filtered


def test_parcel_default_is_review_state_name():
    assert "manual_review" in Parcel.all_states()


@pytest.fixture
def registry_snapshot():
    from ops_console import registry

    saved = {
        k: dataclasses.replace(v, state_classification=dict(v.state_classification))
        for k, v in registry._machines.items()
    }
    yield registry
    registry._machines.clear()
    registry._machines.update(saved)


def test_an_app_can_classify_a_state_by_itself(registry_snapshot):
    """E.g. payments: a refund in ``failed`` means its automatic retries are exhausted."""
    parcel = make_parcel()
    kernel.apply(parcel, "pack", "pack-1", {"weight_grams": 500}, actor="warehouse")
    registry_snapshot.register(Parcel, state_classification={"packed": Classification.RETRIES_EXHAUSTED})
    row = row_of(PARCEL, parcel.pk)
    assert row.classification == Classification.RETRIES_EXHAUSTED
    with pytest.raises(ValueError):
        registry_snapshot.register(Parcel, state_classification={"packed": "on fire"})


def test_a_final_state_an_operator_can_repair_out_of_is_listed_as_evidence_conflicts(monkeypatch):
    """E.g. a print job in ``unknown``: final for automation, but a human settles it."""
    parcel = make_review_parcel()
    monkeypatch.setattr(Parcel, "TERMINAL_STATES", frozenset({"delivered", "cancelled", "manual_review"}))
    monkeypatch.setattr(
        Parcel, "WAIT_POLICIES", {k: v for k, v in Parcel.WAIT_POLICIES.items() if k != "manual_review"}
    )
    from ops_console.selectors import waiting_states

    assert "manual_review" in waiting_states(Parcel) and "cancelled" not in waiting_states(Parcel)
    assert row_of(PARCEL, parcel.pk).classification == Classification.EVIDENCE_CONFLICTS

"""The waiting list and the dashboard are index-backed: their plans name the kernel's indexes.

Tables in a test are tiny, so the planner would scan them whatever the indexes; ``enable_seqscan =
off`` asks "can this query use an index at all?", which is what a missing index breaks. The plans are
also written to test-artifacts/console-query-plans.txt (and quoted in docs/console.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection, transaction

from ops_console.selectors import WaitingFilter, waiting_sql
from workflow.models import OutboxItem

from .conftest import make_dead_item, make_parcel, make_review_parcel

pytestmark = pytest.mark.django_db

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def explain(sql: str, params: list) -> str:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.fixture
def data():
    make_review_parcel()
    make_dead_item(make_parcel())


def test_outbox_waiting_rows_use_the_state_age_index_and_the_timeline_index(data):
    sql, params = waiting_sql(WaitingFilter(machine=OutboxItem.aggregate_label(), state="dead"))
    plan = explain(sql, params)
    _save("waiting list, outbox machine, state=dead", plan)
    assert "outbox_state_age" in plan
    assert "transition_timeline" in plan


def test_machine_rows_join_owed_work_and_last_event_through_indexes(data):
    sql, params = waiting_sql(WaitingFilter(machine="kernel_app.parcel"))
    plan = explain(sql, params)
    _save("waiting list, parcel machine (joins owed outbox work and the last event)", plan)
    assert "outbox_aggregate" in plan
    assert "transition_timeline" in plan


def test_dashboard_oldest_per_state_is_an_index_scan(data):
    query = OutboxItem.objects.filter(state="dead").order_by("entered_state_at", "id").values("id")[:1]
    sql, params = query.query.sql_with_params()
    plan = explain(sql, list(params))
    _save("dashboard: oldest dead outbox item", plan)
    assert "outbox_state_age" in plan


def _save(title: str, plan: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / "console-query-plans.txt", "a") as out:
        out.write(f"== {title}\n{plan}\n\n")


def test_every_business_machine_indexes_state_then_entered_state_at():
    """The waiting list filters each machine by state and age, the dashboard asks for the oldest per
    state: each machine table needs an index whose leading columns are (state, entered_state_at).
    Add to the model's Meta: ``models.Index(fields=["state", "entered_state_at"], name="<table>_state_age")``.
    (The kernel's test-only Parcel is exempt.)"""
    from workflow.machine import machines

    missing = []
    for model in machines():
        if model.__module__.startswith("tests."):
            continue
        leading = [list(index.fields[:2]) for index in model._meta.indexes]
        if ["state", "entered_state_at"] not in leading:
            missing.append(model.aggregate_label())
    assert not missing, f"machines without a (state, entered_state_at) index: {missing}"

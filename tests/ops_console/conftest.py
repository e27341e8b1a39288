"""Console fixtures: users per role, and records in each of the waiting classifications.

Records are built through the kernel (create/apply/deliver_one), never by writing state columns, so
the console reads exactly what production would hold.
"""

from __future__ import annotations

import uuid

import pytest
from django.test import Client

from ops_console.services import console_user_create
from tests.kernel_app.models import Parcel
from workflow import clock, kernel, outbox
from workflow.models import OutboxItem

PASSWORD = "correct horse battery"


@outbox.effect_handler("console_test.provider_down", max_attempts=2, base_delay_seconds=5, max_delay_seconds=5)
def provider_down(item):
    raise outbox.RetryableEffectError("provider answered 503 Service Unavailable (request id req_123)")


@pytest.fixture
def support_user(db):
    return console_user_create(username="sam-support", password=PASSWORD, role="support")


@pytest.fixture
def operator_user(db):
    return console_user_create(username="olga-operator", password=PASSWORD, role="operator")


def _client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def support_client(support_user):
    return _client_for(support_user)


@pytest.fixture
def operator_client(operator_user):
    return _client_for(operator_user)


def make_parcel(**fields) -> Parcel:
    defaults = {"address": "1 Test Street", "weight_grams": 500}
    return kernel.create(Parcel, actor="test", **{**defaults, **fields})


def make_review_parcel(**fields) -> Parcel:
    """A parcel routed to manual_review by evidence: the carrier's weight differs from ours."""
    parcel = make_parcel(**fields)
    kernel.apply(parcel, "pack", "pack-1", {"weight_grams": 500}, actor="warehouse")
    outcome = kernel.apply(parcel, "ship", "ship-1", {"weight_grams": 900, "booking": "bk-1"}, actor="carrier")
    assert outcome.result == "needs_review" and parcel.state == "manual_review"
    return parcel


def promise_for(parcel: Parcel, effect_type: str = "console_test.provider_down", **fields) -> OutboxItem:
    return kernel.create(
        OutboxItem,
        actor="test",
        effect_type=effect_type,
        effect_key=f"test:{uuid.uuid4()}",
        aggregate_type=parcel.aggregate_label(),
        aggregate_id=parcel.pk,
        **fields,
    )


def make_retrying_item(parcel: Parcel) -> OutboxItem:
    item = promise_for(parcel, max_attempts=2)
    assert outbox.deliver_one(item.pk) == "attempt_failed"
    item.refresh_from_db()
    return item


def make_dead_item(parcel: Parcel) -> OutboxItem:
    item = make_retrying_item(parcel)
    with clock.travel(60):
        assert outbox.deliver_one(item.pk) == "retries_exhausted"
    item.refresh_from_db()
    assert item.state == OutboxItem.State.DEAD
    return item

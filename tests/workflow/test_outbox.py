"""Outbox delivery: after-commit only, retries with growing delays, dead letters, requeue with a
reason, one runner per item at a time, and a worker killed mid-handler losing no work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction

from tests.kernel_app.models import Parcel
from workflow import clock, kernel, outbox
from workflow.errors import ValidationFailed
from workflow.models import OutboxAttempt, OutboxItem

pytestmark = pytest.mark.django_db

CALLS: list[int] = []


@outbox.effect_handler("test.always_fails", max_attempts=4, base_delay_seconds=10, max_delay_seconds=10_000)
def always_fails(item):
    CALLS.append(item.pk)
    raise outbox.RetryableEffectError("provider answered 503")


@outbox.effect_handler("test.permanent")
def permanent(item):
    raise outbox.PermanentEffectError("provider answered 400: amount must be positive")


@outbox.effect_handler("test.records")
def records(item):
    CALLS.append(item.pk)
    return {"echo": item.effect_key}


def promise(effect_type: str, key: str = "k1", **fields) -> OutboxItem:
    return kernel.create(OutboxItem, actor="test", effect_type=effect_type, effect_key=key, **fields)


@pytest.fixture(autouse=True)
def _reset_calls():
    CALLS.clear()


def test_item_written_in_a_rolled_back_transaction_never_runs():
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        parcel = kernel.create(Parcel, actor="t", address="A")
        kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})
        assert OutboxItem.objects.count() == 1
        raise Boom

    assert OutboxItem.objects.count() == 0
    assert outbox.deliver_one() is None


def test_successful_delivery_records_attempt_and_result():
    item = promise("test.records", "key-ok")

    assert outbox.deliver_one() == "delivered"

    item.refresh_from_db()
    assert (item.state, item.attempts, item.result) == ("delivered", 1, {"echo": "key-ok"})
    assert [item.pk] == CALLS
    attempt = OutboxAttempt.objects.get(item=item)
    assert attempt.succeeded and attempt.number == 1
    assert outbox.deliver_one() is None  # delivered items are never claimed again


def test_failing_handler_is_retried_with_growing_delays_then_dead():
    item = promise("test.always_fails", max_attempts=4)
    delays = []
    for expected in ["attempt_failed", "attempt_failed", "attempt_failed", "retries_exhausted"]:
        item.refresh_from_db()
        with clock.travel(item.next_attempt_at - clock.now() + timedelta(seconds=1)):
            event = outbox.deliver_one(item.pk)
            assert event == expected
            item.refresh_from_db()
            if event == "attempt_failed":
                assert outbox.deliver_one(item.pk) is None  # not due again before its backoff
                last = OutboxAttempt.objects.filter(item=item).order_by("-number").first()
                delays.append((item.next_attempt_at - last.finished_at).total_seconds())

    assert item.state == "dead" and item.attempts == 4
    assert "503" in item.last_error
    assert len(CALLS) == 4
    assert delays == sorted(delays) and delays[0] < delays[1] < delays[2], delays
    assert 5 <= delays[0] < 10 and 10 <= delays[1] < 20 and 20 <= delays[2] < 40  # base 10 s, doubling, jittered
    assert OutboxAttempt.objects.filter(item=item, succeeded=False).count() == 4


def test_permanent_error_goes_dead_at_once():
    item = promise("test.permanent")
    assert outbox.deliver_one() == "retries_exhausted"
    item.refresh_from_db()
    assert (item.state, item.attempts) == ("dead", 1)
    assert "amount must be positive" in item.last_error


def test_missing_handler_is_a_dead_letter_not_a_crash():
    item = promise("test.nobody_handles_this")
    outbox.deliver_one()
    item.refresh_from_db()
    assert item.state == "dead" and "no handler" in item.last_error


def test_requeue_of_a_dead_item_needs_actor_and_reason_and_gives_new_attempts():
    item = promise("test.permanent", "k-dead")
    outbox.deliver_one()

    with pytest.raises(ValidationFailed):
        outbox.outbox_requeue(item_id=item.pk, actor="operator:ann", reason="")
    preview = outbox.outbox_requeue(item_id=item.pk, actor="operator:ann", reason="provider fixed", dry_run=True)
    assert (preview.result, preview.state) == ("applied", "pending")
    item.refresh_from_db()
    assert item.state == "dead"

    outcome = outbox.outbox_requeue(item_id=item.pk, actor="operator:ann", reason="provider fixed")

    item.refresh_from_db()
    assert (outcome.result, item.state, item.max_attempts) == ("applied", "pending", 1 + 8)
    timeline = list(kernel.timeline(item).values_list("event_type", "actor", "reason"))
    assert timeline[-1] == ("requeue", "operator:ann", "provider fixed")


def test_bulk_requeue_previews_then_applies():
    for n in range(3):
        promise("test.permanent", f"bulk-{n}")
        outbox.deliver_one()
    preview = outbox.outbox_requeue_dead(actor="operator:ann", reason="retry after outage", dry_run=True)
    assert [o.result for o in preview] == ["applied"] * 3
    assert OutboxItem.objects.filter(state="dead").count() == 3
    outbox.outbox_requeue_dead(actor="operator:ann", reason="retry after outage")
    assert OutboxItem.objects.filter(state="pending").count() == 3


def test_backoff_is_capped():
    config = outbox.EffectConfig("x", None, base_delay_seconds=2, max_delay_seconds=60)
    assert outbox.backoff_delay(30, config, rng=lambda: 0.999) < 60
    assert outbox.backoff_delay(1, config, rng=lambda: 0.0) == 1.0


@pytest.mark.django_db(transaction=True)
def test_two_workers_never_run_the_same_item_at_once():
    entered = threading.Event()
    release = threading.Event()
    runs: list[int] = []

    @outbox.effect_handler("test.slow")
    def slow(item):
        runs.append(item.pk)
        entered.set()
        release.wait(10)

    item = promise("test.slow", "slow-1")
    results: dict[str, str | None] = {}

    def worker(name: str) -> None:
        try:
            results[name] = outbox.deliver_one(item.pk)
        finally:
            connection.close()

    first = threading.Thread(target=worker, args=("first",))
    first.start()
    assert entered.wait(10)
    second = threading.Thread(target=worker, args=("second",))
    second.start()
    second.join(10)  # returns at once: the row is locked, so it is skipped
    release.set()
    first.join(10)

    assert results == {"first": "delivered", "second": None}
    assert runs == [item.pk]


HANG_SCRIPT = """
import os, sys, time, pathlib
import django
django.setup()
from workflow import outbox

@outbox.effect_handler("test.hang")
def hang(item):
    pathlib.Path(sys.argv[1]).write_text(str(item.pk))
    time.sleep(120)

outbox.deliver_one()
"""


@pytest.mark.django_db(transaction=True)
def test_worker_killed_mid_handler_leaves_item_for_the_sweep(tmp_path):
    item = promise("test.hang", "hang-1")
    marker = tmp_path / "entered"
    db = connection.settings_dict
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings_test",
           "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"}
    proc = subprocess.Popen([sys.executable, "-c", HANG_SCRIPT, str(marker)], env=env,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert proc.poll() is None, "worker exited early"
            assert time.monotonic() < deadline, "worker never entered the handler"
            time.sleep(0.05)
        # While the worker holds the claim, nobody else can take the item.
        assert outbox.deliver_one(item.pk) is None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()

    @outbox.effect_handler("test.hang")
    def hang(item):  # this "worker" finishes the job
        return {"finished_by": "sweep"}

    # The dead worker's transaction rolled back: no attempt recorded, item still due.
    item.refresh_from_db()
    assert (item.state, item.attempts) == ("pending", 0)
    deadline = time.monotonic() + 10
    while outbox.sweep() == 0:  # PostgreSQL may take a moment to notice the closed connection
        assert time.monotonic() < deadline
        time.sleep(0.1)
    item.refresh_from_db()
    assert (item.state, item.attempts, item.result) == ("delivered", 1, {"finished_by": "sweep"})

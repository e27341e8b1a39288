"""A real Celery worker (subprocess, Redis broker) drains the outbox: after-commit enqueue, and the
sweep task for items whose message was never sent."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from tests.kernel_app.models import Parcel
from workflow import kernel
from workflow.models import OutboxItem
from workflow.tasks import sweep_outbox

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def celery_worker_process(tmp_path):
    db = connection.settings_dict
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings_test",
           "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"}
    from config.celery import app

    app.control.purge()
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "config", "worker", "--pool=solo",
                             "--without-heartbeat", "--without-gossip", "--without-mingle", "-l", "INFO"],
                            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    yield proc
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def wait_for(predicate, timeout=40.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.django_db(transaction=True)
def test_worker_delivers_items_enqueued_after_commit(celery_worker_process, settings):
    settings.OUTBOX_ENQUEUE_ON_COMMIT = True
    parcel = kernel.create(Parcel, actor="t", address="A")
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})
    item = OutboxItem.objects.get(aggregate_id=parcel.pk)

    assert wait_for(lambda: OutboxItem.objects.get(pk=item.pk).state == "delivered"), "worker never delivered"
    assert OutboxItem.objects.get(pk=item.pk).attempts == 1


@pytest.mark.django_db(transaction=True)
def test_sweep_task_delivers_items_whose_message_was_lost(celery_worker_process, settings):
    settings.OUTBOX_ENQUEUE_ON_COMMIT = False  # as if the process died between commit and enqueue
    parcel = kernel.create(Parcel, actor="t", address="A")
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})
    item = OutboxItem.objects.get(aggregate_id=parcel.pk)
    time.sleep(1)
    assert OutboxItem.objects.get(pk=item.pk).state == "pending"

    sweep_outbox.delay()

    assert wait_for(lambda: OutboxItem.objects.get(pk=item.pk).state == "delivered"), "sweep never delivered"
    assert settings.CELERY_BEAT_SCHEDULE["outbox-sweep"]["task"] == sweep_outbox.name


@pytest.mark.django_db(transaction=True)
def test_wakeups_are_published_off_the_commit_path(monkeypatch, settings):
    """The after-commit publish runs on the publisher thread, not in the committing thread."""
    from workflow import outbox

    settings.OUTBOX_ENQUEUE_ON_COMMIT = True
    settings.OUTBOX_PUBLISH_IN_BACKGROUND = True
    published: list[tuple[list[int], str]] = []
    monkeypatch.setattr(outbox, "_publish",
                        lambda ids: published.append((list(ids), threading.current_thread().name)))
    parcel = kernel.create(Parcel, actor="t", address="A")
    kernel.apply(parcel, "pack", "e1", {"weight_grams": 5})
    item = OutboxItem.objects.get(aggregate_id=parcel.pk)

    assert outbox._publisher.wait_idle(10)
    assert published == [([item.pk], "outbox-publisher")]

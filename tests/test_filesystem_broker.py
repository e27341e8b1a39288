"""`make run`'s broker (config.broker): a reader never sees a half-written message or exchange table.

kombu's own filesystem transport creates the file first and writes it afterwards; a worker that read
it in between stopped with "Unrecoverable error: JSONDecodeError" during `make run`. Here the moment
between "written" and "visible" is frozen (by wrapping the rename/link that publishes the file) and a
reader looks at the folder then: it must find nothing, and afterwards the whole thing.
"""

from __future__ import annotations

import os
from queue import Empty

import pytest
from kombu import Connection

from config import broker


@pytest.fixture
def connection(tmp_path):
    folders = {"data_folder_in": str(tmp_path / "out"), "data_folder_out": str(tmp_path / "out"),
               "processed_folder": str(tmp_path / "processed"), "control_folder": str(tmp_path / "control")}
    for name in ("out", "processed"):
        (tmp_path / name).mkdir()
    with Connection("filesystem://", transport="config.broker:Transport", transport_options=folders) as conn:
        yield conn


def test_a_message_is_invisible_until_it_is_whole(connection, monkeypatch):
    channel = connection.default_channel
    seen_before_publish = []
    real_replace = os.replace

    def replace_after_a_reader_looked(src, dst):
        assert os.path.getsize(src) > 0  # the body is complete before it gets its final name
        try:
            seen_before_publish.append(channel._get("wakeups"))
        except Empty:
            seen_before_publish.append(None)
        real_replace(src, dst)

    monkeypatch.setattr(broker.os, "replace", replace_after_a_reader_looked)
    channel._put("wakeups", {"body": "outbox sweep"})

    assert seen_before_publish == [None]
    assert channel._get("wakeups") == {"body": "outbox sweep"}


def test_an_exchange_table_is_created_whole_and_keeps_its_bindings(connection, tmp_path, monkeypatch):
    channel = connection.default_channel
    real_link = os.link
    seen_before_create = []

    def link_after_a_reader_looked(src, dst):
        seen_before_create.append(channel.get_table("ledgerflow"))  # kombu: a missing table is empty
        real_link(src, dst)

    monkeypatch.setattr(broker.os, "link", link_after_a_reader_looked)
    channel._queue_bind("ledgerflow", "ledgerflow", None, "ledgerflow")
    channel._queue_bind("ledgerflow", "other", None, "other")  # the table exists now: kombu's locked update

    assert seen_before_create == [[]]
    assert sorted(q.queue for q in channel.get_table("ledgerflow")) == ["ledgerflow", "other"]
    assert [p.name for p in (tmp_path / "control").iterdir()] == ["ledgerflow.exchange"]  # no partial left


def test_a_task_round_trips_through_a_real_queue(connection):
    queue = connection.SimpleQueue("ledgerflow")
    queue.put({"task": "workflow.tasks.sweep_outbox"})
    message = queue.get(timeout=2)
    message.ack()
    queue.close()
    assert message.payload == {"task": "workflow.tasks.sweep_outbox"}

"""Case 5, outbox drain: a backlog of pending items on the no-op handler ``workflow.noop``, delivered by
real ``celery worker`` subprocesses (1, then 2; Redis broker, a queue of this run's own), versus a raw
``SELECT … FOR UPDATE SKIP LOCKED`` claim loop over the same backlog (1, then 2 connections).

Celery path = production path: one ``deliver_outbox_item(item_id)`` message per item (what
``enqueue_after_commit`` sends), each running ``workflow.outbox.deliver_one`` (claim under a row lock,
handler, attempt row, ``apply(item, "delivered")`` through the kernel). The raw loop claims, writes the
attempt row and marks the item delivered, nothing else: the database's limit for a drain.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

import psycopg

from .. import db, processes
from ..measure import Row, Worker, fill_latency, run_concurrent

CLAIM = (
    "SELECT id, attempts FROM workflow_outboxitem WHERE state IN ('pending', 'retry_scheduled')"
    " AND next_attempt_at <= now() ORDER BY next_attempt_at, id LIMIT 1 FOR UPDATE SKIP LOCKED"
)
ATTEMPT = (
    "INSERT INTO workflow_outboxattempt (item_id, number, started_at, finished_at, succeeded, retryable,"
    " error, worker) VALUES (%s, %s, now(), now(), true, true, '', %s)"
)
DELIVERED = (
    "UPDATE workflow_outboxitem SET state = 'delivered', attempts = attempts + 1, delivered_at = now(),"
    " state_version = state_version + 1, entered_state_at = now(), updated_at = now() WHERE id = %s"
)


MAX_MESSAGES = 10_000


def _delivered(conn: psycopg.Connection) -> int:
    count = conn.execute("SELECT count(*) FROM workflow_outboxitem WHERE state = 'delivered'").fetchone()[0]
    conn.commit()
    return count


def purge_queue(broker_url: str, queue: str) -> None:
    """Delete this run's queue and kombu's bookkeeping for it (bindings), nothing else."""
    import redis

    client = redis.Redis.from_url(broker_url)
    keys = [*client.scan_iter(match=f"{queue}*"), *client.scan_iter(match=f"_kombu.binding*{queue}")]
    if keys:
        client.delete(*keys)
    client.close()


def publish(item_ids: list[int]) -> float:
    from config.celery import app
    from workflow.tasks import deliver_outbox_item

    t0 = time.perf_counter()
    with app.producer_or_acquire() as producer:
        for item_id in item_ids:
            deliver_outbox_item.apply_async((item_id,), producer=producer)
    return time.perf_counter() - t0


def _service_times(conn: psycopg.Connection, since: float, until: float) -> list[float]:
    """Per worker, the gaps between consecutive finished attempts inside the window: time per item."""
    rows = conn.execute(
        "SELECT worker, extract(epoch FROM finished_at) FROM workflow_outboxattempt"
        " WHERE finished_at BETWEEN to_timestamp(%s) AND to_timestamp(%s) ORDER BY worker, finished_at",
        [since, until],
    ).fetchall()
    conn.commit()
    gaps, last = [], {}
    for worker, at in rows:
        at = float(at)
        if worker in last:
            gaps.append(at - last[worker])
        last[worker] = at
    return gaps


def _celery_phase(conn, *, workers: int, window: float, queue: str, log) -> Row:
    procs = [
        processes.start(
            [
                str(processes.BIN / "celery"),
                "-A",
                "config",
                "worker",
                "-Q",
                queue,
                "--pool",
                "solo",
                "-n",
                f"bench{n}-{queue}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel",
                "WARNING",
            ],
            log_name=f"celery-worker-{n}",
        )
        for n in range(workers)
    ]
    try:
        start_count, deadline = _delivered(conn), time.monotonic() + 60
        while _delivered(conn) < start_count + 20 * workers:  # every worker is up and delivering
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("celery workers did not start delivering (see bench/results/celery-worker-*.log)")
            time.sleep(0.1)
        time.sleep(0.5)
        c0, t0 = _delivered(conn), time.time()
        time.sleep(window)
        c1, t1 = _delivered(conn), time.time()
    finally:
        for p in procs:
            processes.stop(p)
    row = Row(
        case="5 outbox",
        variant=f"celery worker x{workers} (deliver_one)",
        concurrency=workers,
        ops=c1 - c0,
        seconds=t1 - t0,
        kinds={"delivered": c1 - c0},
    )
    row.notes = "latency = time per item per worker"
    if c1 >= MAX_MESSAGES:
        row.notes += f"; the {MAX_MESSAGES} published messages ran out: rate understated"
    return fill_latency(row, _service_times(conn, t0, t1))


class RawClaimWorker(Worker):
    def setup(self) -> None:
        self.conn = psycopg.connect(os.environ["DATABASE_URL"])
        self.name = f"{socket.gethostname()}:raw:{id(self)}"

    def op(self) -> str:
        with self.conn.cursor() as cur:
            cur.execute(CLAIM)
            claimed = cur.fetchone()
            if claimed is None:
                self.conn.commit()
                return "empty"
            item_id, attempts = claimed
            cur.execute(ATTEMPT, [item_id, attempts + 1, self.name])
            cur.execute(DELIVERED, [item_id])
        self.conn.commit()
        return "delivered"

    def teardown(self) -> None:
        self.conn.close()


def run(
    conn: psycopg.Connection,
    *,
    backlog: int,
    window: float,
    queue: str,
    broker_url: str,
    log: Callable[[str], None],
) -> list[Row]:
    ids = db.generate_outbox_backlog(conn, backlog)
    purge_queue(broker_url, queue)
    # Publishing costs ~0.5 ms a message here: send what the two windows can drain, not all 50k.
    messages = ids[: min(len(ids), MAX_MESSAGES)]
    took = publish(messages)
    log(f"outbox backlog: {backlog} pending items, {len(messages)} broker messages published in {took:.1f}s")
    rows = []
    try:
        for workers in (1, 2):
            rows.append(_celery_phase(conn, workers=workers, window=window, queue=queue, log=log))
            log(f"{rows[-1].key}: {rows[-1].throughput:.0f}/s")
    finally:
        purge_queue(broker_url, queue)
    for c in (1, 2):
        db.generate_outbox_backlog(conn, backlog)
        seconds, latencies, kinds = run_concurrent(lambda n: RawClaimWorker(), concurrency=c, duration=window)
        row = Row(
            case="5 outbox",
            variant="raw SKIP LOCKED claim loop",
            concurrency=c,
            ops=kinds.get("delivered", 0),
            seconds=seconds,
            kinds=dict(kinds),
        )
        if kinds.get("empty"):
            row.notes = f"backlog of {backlog} ran dry: rate understated"
        rows.append(fill_latency(row, latencies))
    # Where the Celery path's time goes: the same deliver_one, called in-process (no broker, no worker).
    db.generate_outbox_backlog(conn, backlog)
    seconds, latencies, kinds = run_concurrent(lambda n: DeliverOneWorker(), concurrency=1, duration=window)
    row = Row(
        case="5 outbox",
        variant="deliver_one in-process (no broker)",
        concurrency=1,
        ops=kinds.get("delivered", 0),
        seconds=seconds,
        kinds=dict(kinds),
        notes="isolates the kernel's delivery cost from Celery's",
    )
    rows.append(fill_latency(row, latencies))
    return rows


class DeliverOneWorker(Worker):
    def op(self) -> str:
        from workflow.outbox import deliver_one

        return deliver_one() or "empty"

    def teardown(self) -> None:
        from django.db import connection

        connection.close()

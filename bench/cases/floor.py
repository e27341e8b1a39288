"""Case 1, the floor: one transition as raw psycopg statements, no ORM, no Python rules.

Lock the row, check the event identity, insert the transition record, insert the outbox item, the
versioned update, commit. What the database on this machine can do; every other case is a fraction.
"""

from __future__ import annotations

import json
import os
import random

import psycopg

from ..measure import Row, Worker, fill_latency, run_concurrent
from ..pools import AggregatePool
from ..subject import SUBJECT, payload_hash

LOCK = "SELECT state, state_version FROM {table} WHERE id = %s FOR UPDATE"
KNOWN = (
    "SELECT id, payload_hash, result FROM workflow_transition WHERE aggregate_type = %s AND aggregate_id = %s"
    " AND event_identity = %s AND result <> 'conflict'"
)
INSERT_TRANSITION = (
    "INSERT INTO workflow_transition (aggregate_type, aggregate_id, event_type, event_identity,"
    " payload_hash, payload, from_state, to_state, from_version, to_version, result, detail, actor, reason,"
    " created_at) VALUES (%s, %s, %s, %s, %s, '{}', %s, %s, %s, %s, 'applied', '', 'system:bench', '', now())"
    " RETURNING id"
)
INSERT_OUTBOX = (
    "INSERT INTO workflow_outboxitem (effect_type, effect_key, aggregate_type, aggregate_id, payload,"
    " attempts, max_attempts, next_attempt_at, last_error, state, state_version, entered_state_at,"
    " created_at, updated_at)"
    " VALUES ('workflow.noop', %s, %s, %s, %s, 0, 3, now(), '', 'pending', 1, now(), now(), now())"
    " ON CONFLICT (effect_key) DO NOTHING RETURNING id"
)
UPDATE = (
    "UPDATE {table} SET state = %s, state_version = state_version + 1, entered_state_at = now(),"
    " updated_at = now() WHERE id = %s AND state_version = %s"
)


class FloorWorker(Worker):
    def __init__(self, pool: AggregatePool, table: str) -> None:
        self.pool, self.table = pool, table
        self.lock_sql, self.update_sql = LOCK.format(table=table), UPDATE.format(table=table)
        self.label = SUBJECT.label
        self.hashes = {e: payload_hash(e, {}) for e, _ in SUBJECT.forward.values()}
        self.tag = random.randrange(1 << 30)

    def setup(self) -> None:
        self.conn = psycopg.connect(os.environ["DATABASE_URL"])

    def op(self) -> str:
        order_id, state = self.pool.take()
        event, target = SUBJECT.forward[state]
        identity = f"floor:{self.tag}:{order_id}:{event}"
        conn = self.conn
        with conn.cursor() as cur:
            cur.execute(self.lock_sql, [order_id])
            _, version = cur.fetchone()
            cur.execute(KNOWN, [self.label, order_id, identity])
            if cur.fetchone() is not None:
                raise AssertionError("a fresh identity was already recorded")
            cur.execute(
                INSERT_TRANSITION,
                [
                    self.label,
                    order_id,
                    event,
                    identity,
                    self.hashes[event],
                    state,
                    target,
                    version,
                    version + 1,
                ],
            )
            cur.execute(
                INSERT_OUTBOX,
                [
                    f"{self.label}:{order_id}:{SUBJECT.effect_suffix[event]}",
                    self.label,
                    order_id,
                    json.dumps({"order": order_id}),
                ],
            )
            cur.execute(self.update_sql, [target, order_id, version])
            if cur.rowcount != 1:
                raise AssertionError("versioned update missed under a row lock")
        conn.commit()
        self.pool.give_back(order_id, target)
        return "write"

    def teardown(self) -> None:
        self.conn.close()


def run(pool: AggregatePool, *, concurrency: int, duration: float) -> Row:
    table = SUBJECT.model()._meta.db_table
    seconds, latencies, kinds = run_concurrent(
        lambda n: FloorWorker(pool, table),
        concurrency=concurrency,
        duration=duration,
        warmup=min(1.0, duration / 5),
    )
    row = Row(
        case="1 floor",
        variant="raw psycopg transition",
        concurrency=concurrency,
        ops=sum(kinds.values()),
        seconds=seconds,
        kinds=dict(kinds),
    )
    return fill_latency(row, latencies)

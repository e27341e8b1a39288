"""Case 6, scale: ``apply`` latency and the console's waiting-states query at a small and a large
number of aggregates (generated with COPY), same machine, same run. The ratio large/small of the p50
latency must stay near 1 for an index-backed design. EXPLAIN (ANALYZE, BUFFERS) of each query at each
size is saved beside the results.

The waiting-states query is the console's list (oldest waiting first per non-terminal state, with the
owed outbox work of each row): until ops_console's selector is on main it is written here against the
subject's table; swap ``waiting_states_sql`` for the console selector's SQL when it lands.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import psycopg

from .. import db
from ..measure import Row, fill_latency, run_concurrent
from ..pools import AggregatePool
from ..subject import SUBJECT
from . import kernel


def waiting_states_sql(table: str) -> str:
    return f"""
        SELECT w.state, w.id, w.state_version, w.entered_state_at, now() - w.entered_state_at AS age,
               (SELECT count(*) FROM workflow_outboxitem o
                 WHERE o.aggregate_type = %(label)s AND o.aggregate_id = w.id
                   AND o.state IN ('pending', 'retry_scheduled', 'dead')) AS owed_effects
        FROM unnest(%(states)s::text[]) AS s(state)
        CROSS JOIN LATERAL (
            SELECT id, state, state_version, entered_state_at FROM {table} b
            WHERE b.state = s.state ORDER BY b.entered_state_at LIMIT 50
        ) w
        ORDER BY w.state, w.entered_state_at
    """


def apply_lookups_sql(table: str) -> str:
    """What apply reads before it writes: the aggregate row and the event identity's record."""
    return f"""
        SELECT b.id, b.state, b.state_version, t.id, t.payload_hash, t.result
        FROM {table} b
        LEFT JOIN workflow_transition t
          ON t.aggregate_type = %(label)s AND t.aggregate_id = b.id AND t.event_identity = 'seed:' || b.id
         AND t.result <> 'conflict'
        WHERE b.id = %(probe)s
    """


def state_counts_sql(table: str) -> str:
    return f"SELECT state, count(*) FROM {table} GROUP BY state"


def _time_query(conn: psycopg.Connection, sql: str, params: dict, n: int) -> list[float]:
    latencies = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.execute(sql, params).fetchall()
        latencies.append(time.perf_counter() - t0)
    conn.commit()
    return latencies


def _execution_ms(plan: str) -> float:
    match = re.search(r"Execution Time: ([0-9.]+) ms", plan)
    return float(match.group(1)) if match else float("nan")


def _explain(conn: psycopg.Connection, sql: str, params: dict) -> str:
    rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).fetchall()
    conn.commit()
    return "\n".join(r[0] for r in rows)


def _measure(
    conn, size_label: str, n: int, fresh_ids: range, *, ops: int, queries: int, explain: dict[str, str]
) -> list[Row]:
    table = SUBJECT.model()._meta.db_table
    params = {"label": SUBJECT.label, "states": SUBJECT.waiting_states, "probe": n // 2 + 1}
    rows = []
    pool = AggregatePool(fresh_ids, seed=n)  # untouched aggregates, spread over the whole table
    seconds, latencies, kinds = run_concurrent(
        lambda i: kernel.KernelWorker(pool, 0.0, seed=n),
        concurrency=1,
        duration=3600,
        max_ops=ops,
        warmup=min(1.0, ops / 400),  # connection, caches and the first full-page writes stay out of the sample
    )
    rows.append(
        fill_latency(
            Row(
                case="6 scale",
                variant=f"apply at {n:,} ({size_label})",
                concurrency=1,
                ops=sum(kinds.values()),
                seconds=seconds,
                kinds=dict(kinds),
            ),
            latencies,
        )
    )
    for name, sql in (
        ("waiting-states query", waiting_states_sql(table)),
        ("apply lookups (row + identity)", apply_lookups_sql(table)),
        ("state counts", state_counts_sql(table)),
    ):
        _time_query(conn, sql, params, 3)  # warm
        lat = _time_query(conn, sql, params, queries)
        row = Row(
            case="6 scale",
            variant=f"{name} at {n:,} ({size_label})",
            concurrency=1,
            ops=len(lat),
            seconds=sum(lat),
        )
        rows.append(fill_latency(row, lat))
        plans = [_explain(conn, sql, params) for _ in range(5)]
        server_ms = sorted(_execution_ms(p) for p in plans)[2]
        row.notes = f"server execution {server_ms:.3f} ms (median EXPLAIN ANALYZE)"
        slug = name.split(" (")[0].replace(" query", "").replace("-", "_").replace(" ", "_")
        explain[f"{slug}_{size_label}"] = f"-- {name} at {n} aggregates\n{sql}\n-- params {params}\n\n{plans[-1]}\n"
    return rows


def run(
    conn: psycopg.Connection, *, small: int, large: int, ops: int, queries: int, log: Callable[[str], None]
) -> tuple[list[Row], dict[str, str]]:
    explain: dict[str, str] = {}
    db.reset_subject(conn)
    db.generate_aggregates(conn, 1, small)
    _vacuum_analyze(conn)
    rows = _measure(conn, "small", small, range(1, small + 1), ops=ops, queries=queries, explain=explain)
    t0 = time.monotonic()
    db.generate_aggregates(conn, small + 1, large - small)
    _vacuum_analyze(conn)
    log(
        f"scale: grew {SUBJECT.label} from {small:,} to {large:,} with COPY (+ VACUUM ANALYZE) "
        f"in {time.monotonic() - t0:.0f}s"
    )
    rows += _measure(conn, "large", large, range(small + 1, large + 1), ops=ops, queries=queries, explain=explain)
    for row in rows:
        if "state counts" in row.variant:
            row.notes += "; informational: a full count is O(n), the dashboard needs estimates or counters"
    return rows, explain


def _vacuum_analyze(conn: psycopg.Connection) -> None:
    table = SUBJECT.model()._meta.db_table
    conn.autocommit = True
    try:
        for t in (table, "workflow_transition", "workflow_outboxitem"):
            conn.execute(f"VACUUM ANALYZE {t}")
        conn.execute("CHECKPOINT")  # both sizes start from a checkpoint: equal full-page-write pressure
    finally:
        conn.autocommit = False

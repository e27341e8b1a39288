"""Reads over the kernel's tables."""

from __future__ import annotations

import dataclasses

from django.db import connection

from .machine import StateMachine, machines
from .models import STATE_CHANGING_RESULTS, Transition


@dataclasses.dataclass(frozen=True)
class ReplayMismatch:
    aggregate_type: str
    aggregate_id: int
    row_state: str
    row_version: int
    replayed_state: str
    replayed_version: int
    problem: str


def history_mismatches(model: type[StateMachine], *, limit: int = 1000) -> list[ReplayMismatch]:
    """Aggregates whose row disagrees with the replay of their transition history.

    Two checks in SQL: the chain of state-changing records is contiguous (each starts where the
    previous ended, versions step by one), and the last record's state/version equal the row's.
    An aggregate with no record replays to the field's default state at version 1.
    """
    table = connection.ops.quote_name(model._meta.db_table)
    default = model.state_field().get_default()
    results = tuple(str(r) for r in STATE_CHANGING_RESULTS)
    agg_type = model.aggregate_label()
    transitions = Transition._meta.db_table
    placeholders = ", ".join(["%s"] * len(results))
    # Table names come from model metadata, never from input; values are parameters.
    chain_sql = f"""
        SELECT aggregate_id, from_state, to_state, to_version, prev_to_state, prev_to_version FROM (
            SELECT aggregate_id, from_state, to_state, to_version,
                   LAG(to_state) OVER w AS prev_to_state, LAG(to_version) OVER w AS prev_to_version
            FROM {transitions}
            WHERE aggregate_type = %s AND result IN ({placeholders})
            WINDOW w AS (PARTITION BY aggregate_id ORDER BY to_version, id)
        ) chain
        WHERE prev_to_version IS NOT NULL
          AND (from_state <> prev_to_state OR to_version <> prev_to_version + 1)
        LIMIT %s
    """  # noqa: S608
    last_sql = f"""
        SELECT a.id, a.state, a.state_version, COALESCE(last.to_state, %s), COALESCE(last.to_version, 1)
        FROM {table} a
        LEFT JOIN (
            SELECT aggregate_id, to_state, to_version FROM (
                SELECT aggregate_id, to_state, to_version,
                       ROW_NUMBER() OVER (PARTITION BY aggregate_id ORDER BY to_version DESC, id DESC) AS rn
                FROM {transitions}
                WHERE aggregate_type = %s AND result IN ({placeholders})
            ) ranked WHERE rn = 1
        ) last ON last.aggregate_id = a.id
        WHERE a.state <> COALESCE(last.to_state, %s) OR a.state_version <> COALESCE(last.to_version, 1)
        ORDER BY a.id
        LIMIT %s
    """  # noqa: S608
    out: list[ReplayMismatch] = []
    with connection.cursor() as cursor:
        cursor.execute(last_sql, [default, agg_type, *results, default, limit])
        for pk, state, version, replayed_state, replayed_version in cursor.fetchall():
            out.append(ReplayMismatch(agg_type, pk, state, version, replayed_state, replayed_version,
                                      "row differs from the replayed history"))
        cursor.execute(chain_sql, [agg_type, *results, limit])
        for pk, from_state, to_state, to_version, prev_state, prev_version in cursor.fetchall():
            out.append(ReplayMismatch(agg_type, pk, "", 0, to_state, to_version,
                                      f"history breaks: record to v{to_version} starts at {from_state!r} "
                                      f"but v{prev_version} ended at {prev_state!r}"))
    return out


def all_history_mismatches(*, limit_per_machine: int = 1000) -> list[ReplayMismatch]:
    out: list[ReplayMismatch] = []
    for model in machines():
        out.extend(history_mismatches(model, limit=limit_per_machine))
    return out

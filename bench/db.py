"""The bench's own database: created fresh and migrated by the harness; rows generated with COPY."""

from __future__ import annotations

import io
import json
import os
from datetime import UTC, datetime, timedelta
from urllib.parse import urlparse, urlunparse

import psycopg

from .subject import BENCH_ORDER, SUBJECT, Subject, payload_hash

SEED_ACTOR = "system:bench-seed"


def admin_url(database_url: str) -> str:
    parts = urlparse(database_url)
    return urlunparse(parts._replace(path="/postgres"))


def db_name(database_url: str) -> str:
    return urlparse(database_url).path.lstrip("/")


def recreate_database(database_url: str) -> None:
    name = db_name(database_url)
    with psycopg.connect(admin_url(database_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(database_url: str) -> None:
    with psycopg.connect(admin_url(database_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db_name(database_url)}" WITH (FORCE)')


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def connect(database_url: str | None = None) -> psycopg.Connection:
    return psycopg.connect(database_url or os.environ["DATABASE_URL"])


def _tables(subject: Subject) -> tuple[str, str]:
    model = subject.model()
    history = model.history.model._meta.db_table if hasattr(model, "history") else ""
    return model._meta.db_table, history


def reset_subject(conn: psycopg.Connection, subject: Subject = SUBJECT) -> None:
    """Empty the machine and the kernel tables (TRUNCATE: the transition table refuses DELETE)."""
    table, history = _tables(subject)
    names = [table, "workflow_transition", "workflow_outboxitem", "workflow_timer"] + ([history] if history else [])
    conn.execute(f"TRUNCATE {', '.join(names)} RESTART IDENTITY CASCADE")
    conn.commit()


def _copy_text(value) -> str:
    if value is None:
        return r"\N"
    if isinstance(value, datetime):
        return value.isoformat()
    text = str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def _copy(conn: psycopg.Connection, table: str, columns: list[str], rows) -> None:
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        buf = io.StringIO()
        for n, row in enumerate(rows, 1):
            buf.write("\t".join(_copy_text(v) for v in row))
            buf.write("\n")
            if n % 20000 == 0:
                copy.write(buf.getvalue())
                buf = io.StringIO()
        copy.write(buf.getvalue())


def generate_aggregates(conn: psycopg.Connection, first_id: int, count: int, subject: Subject = SUBJECT) -> None:
    """COPY ``count`` aggregates (ids first_id..) spread over the states, each with the transition
    record that brought it into its state (identity ``seed:<id>``, empty payload) so replays find it."""
    model = subject.model()
    table = model._meta.db_table
    base = datetime.now(UTC) - timedelta(days=30)
    ids = range(first_id, first_id + count)
    defaults = _column_defaults(model)
    extra_names = list({**defaults, **subject.extra_columns(0)})
    first = next(iter(subject.forward))
    version_of = {s: n + 1 for n, s in enumerate([first, *[t for _, t in subject.forward.values()]])}

    def aggregate_rows():
        for i in ids:
            state = subject.state_of(i)
            at = base + timedelta(seconds=i % 2_000_000)
            extra = {**defaults, **subject.extra_columns(i)}
            yield [i, state, version_of.get(state, 2), at, at, at, *[extra[k] for k in extra_names]]

    _copy(
        conn,
        table,
        ["id", "state", "state_version", "entered_state_at", "created_at", "updated_at", *extra_names],
        aggregate_rows(),
    )
    hashes = {e: payload_hash(e, {}) for e in subject.entered_by.values()}

    def transition_rows():
        for i in ids:
            state = subject.state_of(i)
            event = subject.entered_by[state]
            to_version = version_of.get(state, 2)
            yield [
                subject.label,
                i,
                event,
                f"seed:{i}",
                hashes[event],
                "{}",
                "",
                state,
                to_version - 1,
                to_version,
                "applied",
                "",
                SEED_ACTOR,
                "",
                base,
            ]

    _copy(
        conn,
        "workflow_transition",
        [
            "aggregate_type",
            "aggregate_id",
            "event_type",
            "event_identity",
            "payload_hash",
            "payload",
            "from_state",
            "to_state",
            "from_version",
            "to_version",
            "result",
            "detail",
            "actor",
            "reason",
            "created_at",
        ],
        transition_rows(),
    )
    conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), %s)", [first_id + count])
    conn.commit()


def _column_defaults(model) -> dict:
    """NOT NULL columns beyond the StateMachine ones, filled with the model's Python defaults (Django sets
    no database defaults, and COPY must name every NOT NULL column)."""
    base = {"id", "state", "state_version", "entered_state_at", "created_at", "updated_at"}
    out = {}
    for f in model._meta.concrete_fields:
        if f.column in base or f.null or not f.has_default():
            continue
        value = f.get_default()
        out[f.column] = json.dumps(value) if f.get_internal_type() == "JSONField" else value
    return out


def generate_naive(conn: psycopg.Connection, count: int, subject: Subject = BENCH_ORDER) -> None:
    from bench.bench_app.models import NaiveOrder

    table = NaiveOrder._meta.db_table
    now = datetime.now(UTC)
    _copy(
        conn,
        table,
        ["id", "state", "reference", "amount_cents", "currency", "updated_at"],
        ([i, subject.state_of(i), f"ord-{i}", 1000, "EUR", now] for i in range(1, count + 1)),
    )
    conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), %s)", [count + 1])
    conn.commit()


def generate_outbox_backlog(conn: psycopg.Connection, count: int, effect_type: str = "workflow.noop") -> list[int]:
    # ids keep growing: transition records of earlier items (identity "attempt:1") must never match a new one
    conn.execute("TRUNCATE workflow_outboxitem CASCADE")
    now = datetime.now(UTC) - timedelta(seconds=5)
    rows = (
        [
            f"drain:{i}",
            effect_type,
            "bench.drain",
            i,
            json.dumps({"n": i}),
            0,
            3,
            now,
            "",
            None,
            None,
            "pending",
            1,
            now,
            now,
            now,
        ]
        for i in range(1, count + 1)
    )
    _copy(
        conn,
        "workflow_outboxitem",
        [
            "effect_key",
            "effect_type",
            "aggregate_type",
            "aggregate_id",
            "payload",
            "attempts",
            "max_attempts",
            "next_attempt_at",
            "last_error",
            "delivered_at",
            "result",
            "state",
            "state_version",
            "entered_state_at",
            "created_at",
            "updated_at",
        ],
        rows,
    )
    conn.commit()
    ids = [r[0] for r in conn.execute("SELECT id FROM workflow_outboxitem ORDER BY id").fetchall()]
    conn.execute("ANALYZE workflow_outboxitem")
    conn.commit()
    return ids


def analyze(conn: psycopg.Connection) -> None:
    conn.autocommit = True
    try:
        conn.execute("ANALYZE")
    finally:
        conn.autocommit = False

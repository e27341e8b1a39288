"""The station's durable ledger (SQLite): every job received, how far it got, and every report.

Two tables:

``jobs``     one row per server job id (the primary key is what makes "never print twice" hold: a
             job that is already here is not printed again, whatever the server offers). ``phase``
             moves ``received → handing_off → handed_off → completed | failed``, or ``interrupted``
             when the station itself cannot tell whether the OS got the job.
``reports``  an outbox of the reports owed to the server, each with its event id and the exact JSON
             body, so a retry (or the ledger replay after a restart) sends byte-identical content and
             the server answers ``already_applied`` instead of acting twice.

Every phase change and the report it owes are written in one SQLite transaction *before* anything is
sent, with ``synchronous=FULL``: a crash after the write loses nothing the server needs to hear.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id        TEXT PRIMARY KEY,
    title         TEXT NOT NULL DEFAULT '',
    content_type  TEXT NOT NULL DEFAULT '',
    copies        INTEGER NOT NULL DEFAULT 1,
    content_sha256 TEXT NOT NULL DEFAULT '',
    spool_path    TEXT NOT NULL DEFAULT '',
    nonce         TEXT NOT NULL DEFAULT '',
    lease_token   TEXT NOT NULL DEFAULT '',
    phase         TEXT NOT NULL,
    os_job_id     TEXT NOT NULL DEFAULT '',
    reason        TEXT NOT NULL DEFAULT '',
    offers        INTEGER NOT NULL DEFAULT 1,
    received_at   TEXT NOT NULL,
    handed_off_at TEXT,
    finished_at   TEXT
);
CREATE TABLE IF NOT EXISTS reports (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id   TEXT NOT NULL UNIQUE,
    job_id     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at TEXT NOT NULL,
    acked_at   TEXT,
    result     TEXT NOT NULL DEFAULT '',
    server_state TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS reports_unacked ON reports (acked_at, seq);
"""

# Phases of a job on this station (not the server's states: what this station itself observed).
MAX_REASON_CHARS = 10_000  # the server's limit on a report's reason (printing.services.MAX_REASON_CHARS)

RECEIVED = "received"  # content spooled; the OS print path has not been called
HANDING_OFF = "handing_off"  # about to call the OS print path (a crash here is ambiguous)
HANDED_OFF = "handed_off"  # the OS accepted it (os_job_id known); following it
COMPLETED = "completed"
FAILED = "failed"
INTERRUPTED = "interrupted"  # the station cannot tell whether it printed; a human must look
FINAL_PHASES = frozenset({COMPLETED, FAILED, INTERRUPTED})

# Report kinds (the station protocol's vocabulary).
KIND_RECEIVED = "received"
KIND_PRINTING = "printing"
KIND_COMPLETED = "completed"
KIND_FAILED = "failed"
KIND_INTERRUPTED = "interrupted"
FINAL_KINDS = frozenset({KIND_COMPLETED, KIND_FAILED, KIND_INTERRUPTED})
KIND_FOR_PHASE = {COMPLETED: KIND_COMPLETED, FAILED: KIND_FAILED, INTERRUPTED: KIND_INTERRUPTED}


def utcnow() -> str:
    return datetime.now(UTC).isoformat()


@dataclasses.dataclass
class LedgerJob:
    job_id: str
    title: str
    content_type: str
    copies: int
    content_sha256: str
    spool_path: str
    nonce: str
    lease_token: str
    phase: str
    os_job_id: str
    reason: str
    offers: int
    received_at: str
    handed_off_at: str | None
    finished_at: str | None

    @property
    def finished(self) -> bool:
        return self.phase in FINAL_PHASES


@dataclasses.dataclass
class Report:
    seq: int
    event_id: str
    job_id: str
    kind: str
    body: dict[str, Any]
    acked_at: str | None
    result: str


class Ledger:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), isolation_level=None, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    # --- jobs -------------------------------------------------------------------------------
    def get(self, job_id: str) -> LedgerJob | None:
        row = self.db.execute("SELECT * FROM jobs WHERE job_id = ?", (str(job_id),)).fetchone()
        return LedgerJob(**dict(row)) if row else None

    def jobs(self, *, phases: set[str] | None = None) -> list[LedgerJob]:
        rows = self.db.execute("SELECT * FROM jobs ORDER BY received_at, job_id").fetchall()
        out = [LedgerJob(**dict(r)) for r in rows]
        return [j for j in out if phases is None or j.phase in phases]

    def record_received(
        self,
        *,
        job_id: str,
        title: str,
        content_type: str,
        copies: int,
        content_sha256: str,
        spool_path: str,
        lease_token: str,
    ) -> LedgerJob:
        """First sight of a job: the row and its ``received`` report, in one transaction."""
        with self._tx():
            self.db.execute(
                "INSERT INTO jobs (job_id, title, content_type, copies, content_sha256, spool_path, nonce,"
                " lease_token, phase, received_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    str(job_id),
                    title,
                    content_type,
                    copies,
                    content_sha256,
                    spool_path,
                    uuid.uuid4().hex[:8],
                    lease_token,
                    RECEIVED,
                    utcnow(),
                ),
            )
            self._queue(job_id, KIND_RECEIVED, lease_token)
        return self.get(job_id)

    def record_reoffer(self, job_id: str, lease_token: str) -> LedgerJob:
        """The server offered a job we already hold (its earlier lease expired): remember the new lease."""
        with self._tx():
            self.db.execute(
                "UPDATE jobs SET lease_token = ?, offers = offers + 1 WHERE job_id = ?",
                (lease_token, str(job_id)),
            )
        return self.get(job_id)

    def set_phase(
        self,
        job_id: str,
        phase: str,
        *,
        os_job_id: str | None = None,
        reason: str | None = None,
        report: str | None = None,
        report_extra: dict[str, Any] | None = None,
    ) -> LedgerJob:
        """Move a job to ``phase`` and (optionally) queue the report that says so, atomically."""
        with self._tx():
            job = self.get(job_id)
            if job is None:
                raise KeyError(job_id)
            sets = ["phase = ?"]
            args: list[Any] = [phase]
            if os_job_id is not None:
                sets.append("os_job_id = ?")
                args.append(os_job_id)
            if reason is not None:
                sets.append("reason = ?")
                args.append(reason)
            if phase == HANDED_OFF:
                sets.append("handed_off_at = ?")
                args.append(utcnow())
            if phase in FINAL_PHASES:
                sets.append("finished_at = ?")
                args.append(utcnow())
            self.db.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE job_id = ?", (*args, str(job_id)))  # noqa: S608
            if report:
                self._queue(job_id, report, job.lease_token, **(report_extra or {}))
        return self.get(job_id)

    def queue_report(self, job_id: str, kind: str, **extra: Any) -> str:
        """Queue a report under the job's current lease (used when a job is offered again)."""
        with self._tx():
            job = self.get(job_id)
            return self._queue(job_id, kind, job.lease_token, **extra)

    # --- reports ----------------------------------------------------------------------------
    def _queue(
        self,
        job_id: str,
        kind: str,
        lease_token: str,
        *,
        reason: str | None = None,
        os_job_id: str | None = None,
    ) -> str:
        event_id = str(uuid.uuid4())
        body: dict[str, Any] = {
            "event_id": event_id,
            "lease_token": lease_token,
            "kind": kind,
            "occurred_at": utcnow(),
        }
        if reason is not None:
            # The server refuses reasons over 10 000 characters; a failure must always be reportable.
            body["reason"] = reason[:MAX_REASON_CHARS]
        if os_job_id:
            body["os_job_id"] = os_job_id
        self.db.execute(
            "INSERT INTO reports (event_id, job_id, kind, body, created_at) VALUES (?,?,?,?,?)",
            (event_id, str(job_id), kind, json.dumps(body, sort_keys=True), utcnow()),
        )
        return event_id

    def unacked_reports(self) -> list[Report]:
        rows = self.db.execute("SELECT * FROM reports WHERE acked_at IS NULL ORDER BY seq").fetchall()
        return [self._report(r) for r in rows]

    def final_reports(self, limit: int = 500) -> list[Report]:
        """The reports that carry an outcome, newest ``limit`` of them: what a ledger replay sends."""
        marks = ",".join("?" * len(FINAL_KINDS))
        rows = self.db.execute(
            f"SELECT * FROM reports WHERE kind IN ({marks}) ORDER BY seq DESC LIMIT ?",  # noqa: S608
            (*sorted(FINAL_KINDS), limit),
        ).fetchall()
        return [self._report(r) for r in reversed(rows)]

    def reports_for(self, job_id: str) -> list[Report]:
        rows = self.db.execute(
            "SELECT * FROM reports WHERE job_id = ? ORDER BY seq", (str(job_id),)
        ).fetchall()
        return [self._report(r) for r in rows]

    def ack(self, event_id: str, *, result: str, server_state: str = "") -> None:
        self.db.execute(
            "UPDATE reports SET acked_at = ?, result = ?, server_state = ? WHERE event_id = ?",
            (utcnow(), result, server_state, event_id),
        )

    @staticmethod
    def _report(row: sqlite3.Row) -> Report:
        return Report(
            seq=row["seq"],
            event_id=row["event_id"],
            job_id=row["job_id"],
            kind=row["kind"],
            body=json.loads(row["body"]),
            acked_at=row["acked_at"],
            result=row["result"],
        )

    # --- plumbing ---------------------------------------------------------------------------
    class _Tx:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def __enter__(self) -> None:
            self.db.execute("BEGIN IMMEDIATE")

        def __exit__(self, exc_type, exc, tb) -> None:
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")

    def _tx(self) -> Ledger._Tx:
        return Ledger._Tx(self.db)

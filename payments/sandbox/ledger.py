"""The sandbox provider's own ledger: PaymentIntents, charges, refunds, events, idempotency records.

Objects are stored as Stripe-shaped JSON in one SQLite file. One lock serialises the writes (the
sandbox is a test device, not a bank); the HTTP layer never holds it while it sleeps, so an
in-flight request can be observed by a concurrent one with the same idempotency key.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import string
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

API_VERSION = "2025-10-29.clover"

SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    created INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    parent TEXT,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS objects_kind ON objects(kind, seq);
CREATE TABLE IF NOT EXISTS idempotency (
    api_key TEXT NOT NULL,
    key TEXT NOT NULL,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    params_hash TEXT NOT NULL,
    state TEXT NOT NULL,              -- in_flight | done
    status INTEGER,
    body TEXT,
    created REAL NOT NULL,
    PRIMARY KEY (api_key, key)
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    type TEXT NOT NULL,
    created INTEGER NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS deliveries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    url TEXT NOT NULL,
    status_code INTEGER,
    error TEXT,
    at REAL NOT NULL
);
"""

# Test payment methods, as in Stripe's test mode.
DECLINES = {
    "pm_card_chargeDeclined": ("card_declined", "generic_decline", "Your card was declined."),
    "pm_card_visa_chargeDeclined": ("card_declined", "generic_decline", "Your card was declined."),
    "pm_card_chargeDeclinedInsufficientFunds": (
        "card_declined",
        "insufficient_funds",
        "Your card has insufficient funds.",
    ),
    "pm_card_chargeDeclinedExpiredCard": ("expired_card", "expired_card", "Your card has expired."),
}
CANCELABLE = {"requires_payment_method", "requires_capture", "requires_confirmation", "requires_action"}

PAYMENT_INTENT_CREATE_PARAMS = {
    "amount",
    "currency",
    "capture_method",
    "confirm",
    "payment_method",
    "metadata",
    "description",
    "payment_method_types",
    "automatic_payment_methods",
    "expand",
    "statement_descriptor",
    "receipt_email",
    "customer",
    "return_url",
    "off_session",
    "setup_future_usage",
    "confirmation_method",
    "error_on_requires_action",
}
REFUND_CREATE_PARAMS = {"payment_intent", "charge", "amount", "reason", "metadata", "expand"}


class StripeError(Exception):
    """An error Stripe would answer with ``{"error": {...}}`` and an HTTP status."""

    def __init__(
        self,
        status: int,
        type_: str,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        extra: dict[str, Any] | None = None,
        validation: bool = False,
        commit: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        # validation: the endpoint never began executing, so no idempotent result is saved (Stripe).
        self.validation = validation
        # commit: the call changed the ledger before failing (a decline is recorded on the intent).
        self.commit = commit
        self.body: dict[str, Any] = {"type": type_, "message": message}
        if code:
            self.body["code"] = code
            self.body["doc_url"] = f"https://stripe.com/docs/error-codes/{code.replace('_', '-')}"
        if param:
            self.body["param"] = param
        if extra:
            self.body.update(extra)

    def as_json(self) -> dict[str, Any]:
        return {"error": self.body}


def invalid(
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    status: int = 400,
    extra: dict[str, Any] | None = None,
    commit: bool = False,
) -> StripeError:
    return StripeError(
        status, "invalid_request_error", message, code=code, param=param, extra=extra, commit=commit
    )


def param_error(message: str, *, param: str | None = None, code: str | None = None) -> StripeError:
    """Bad input, refused before the endpoint ran."""
    return StripeError(400, "invalid_request_error", message, code=code, param=param, validation=True)


def new_id(prefix: str, length: int = 24) -> str:
    alphabet = string.ascii_letters + string.digits
    return f"{prefix}_" + "".join(secrets.choice(alphabet) for _ in range(length))


def params_hash(method: str, path: str, params: dict[str, Any]) -> str:
    canonical = json.dumps({"method": method, "path": path, "params": params}, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


class Ledger:
    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.RLock()
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.executescript(SCHEMA)
        self._seq = self._max_seq()
        # Events produced inside the current transaction; handed to the webhook dispatcher after commit.
        self._pending_events: list[dict[str, Any]] = []

    def _max_seq(self) -> int:
        row = self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM objects").fetchone()
        return int(row[0])

    @contextmanager
    def transaction(self) -> Iterator[list[dict[str, Any]]]:
        """One atomic change; yields the list of events it produced (valid after the block)."""
        with self.lock:
            produced: list[dict[str, Any]] = []
            self._pending_events = produced
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield produced
            except BaseException:
                self.conn.execute("ROLLBACK")
                produced.clear()
                raise
            else:
                self.conn.execute("COMMIT")
            finally:
                self._pending_events = []

    def reset(self) -> None:
        with self.lock:
            for table in ("objects", "idempotency", "events", "deliveries"):
                self.conn.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed table names

    # --- objects --------------------------------------------------------------------------------
    def put(self, obj: dict[str, Any], parent: str | None = None) -> None:
        existing = self.conn.execute("SELECT seq FROM objects WHERE id = ?", (obj["id"],)).fetchone()
        if existing:
            self.conn.execute("UPDATE objects SET data = ? WHERE id = ?", (json.dumps(obj), obj["id"]))
            return
        self._seq += 1
        self.conn.execute(
            "INSERT INTO objects (id, kind, created, seq, parent, data) VALUES (?, ?, ?, ?, ?, ?)",
            (obj["id"], obj["object"], obj["created"], self._seq, parent, json.dumps(obj)),
        )

    def get(self, kind: str, object_id: str, param: str) -> dict[str, Any]:
        row = self.conn.execute(
            "SELECT data FROM objects WHERE id = ? AND kind = ?", (object_id, kind)
        ).fetchone()
        if row is None:
            raise invalid(f"No such {kind}: '{object_id}'", param=param, code="resource_missing", status=404)
        return json.loads(row[0])

    def all(self, kind: str, parent: str | None = None) -> list[dict[str, Any]]:
        """Newest first, as Stripe lists."""
        if parent is None:
            rows = self.conn.execute("SELECT data FROM objects WHERE kind = ? ORDER BY seq DESC", (kind,))
        else:
            rows = self.conn.execute(
                "SELECT data FROM objects WHERE kind = ? AND parent = ? ORDER BY seq DESC", (kind, parent)
            )
        return [json.loads(r[0]) for r in rows.fetchall()]

    # --- events ---------------------------------------------------------------------------------
    def emit(
        self, event_type: str, obj: dict[str, Any], request: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        event = {
            "id": new_id("evt"),
            "object": "event",
            "api_version": API_VERSION,
            "created": int(time.time()),
            "data": {"object": json.loads(json.dumps(obj))},
            "livemode": False,
            "pending_webhooks": 1,
            "request": request or {"id": None, "idempotency_key": None},
            "type": event_type,
        }
        self.conn.execute(
            "INSERT INTO events (id, type, created, data) VALUES (?, ?, ?, ?)",
            (event["id"], event_type, event["created"], json.dumps(event)),
        )
        self._pending_events.append(event)
        return event

    def event(self, event_id: str) -> dict[str, Any] | None:
        with self.lock:
            row = self.conn.execute("SELECT data FROM events WHERE id = ?", (event_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            rows = self.conn.execute("SELECT data FROM events ORDER BY seq").fetchall()
        return [json.loads(r[0]) for r in rows]

    def record_delivery(
        self, event_id: str, attempt: int, url: str, status_code: int | None, error: str | None
    ) -> None:
        with self.lock:
            self.conn.execute(
                "INSERT INTO deliveries (event_id, attempt, url, status_code, error, at) VALUES (?,?,?,?,?,?)",  # noqa: E501
                (event_id, attempt, url, status_code, error, time.time()),
            )

    def deliveries(self) -> list[dict[str, Any]]:
        with self.lock:
            rows = self.conn.execute(
                "SELECT event_id, attempt, url, status_code, error, at FROM deliveries ORDER BY seq"
            ).fetchall()
        keys = ("event_id", "attempt", "url", "status_code", "error", "at")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    # --- idempotency ----------------------------------------------------------------------------
    def idempotency_claim(
        self, api_key: str, key: str, method: str, path: str, digest: str
    ) -> tuple[str, int | None, str | None]:
        """Claim a key. Answers ("new"|"replay"|"in_flight"|"mismatch", status, body)."""
        with self.lock:
            row = self.conn.execute(
                "SELECT method, path, params_hash, state, status, body FROM idempotency "
                "WHERE api_key = ? AND key = ?",
                (api_key, key),
            ).fetchone()
            if row is None:
                self.conn.execute(
                    "INSERT INTO idempotency (api_key, key, method, path, params_hash, state, created) "
                    "VALUES (?, ?, ?, ?, ?, 'in_flight', ?)",
                    (api_key, key, method, path, digest, time.time()),
                )
                return "new", None, None
            r_method, r_path, r_hash, state, status, body = row
            if (r_method, r_path) != (method, path) or r_hash != digest:
                return "mismatch", None, None
            if state == "in_flight":
                return "in_flight", None, None
            return "replay", status, body

    def idempotency_store(self, api_key: str, key: str, status: int, body: str) -> None:
        """Called inside the effect's transaction, so the effect and its saved answer commit together."""
        self.conn.execute(
            "UPDATE idempotency SET state = 'done', status = ?, body = ? WHERE api_key = ? AND key = ?",
            (status, body, api_key, key),
        )

    def idempotency_release(self, api_key: str, key: str) -> None:
        """No endpoint began executing (validation failed): Stripe saves nothing for the key."""
        with self.lock:
            self.conn.execute(
                "DELETE FROM idempotency WHERE api_key = ? AND key = ? AND state = 'in_flight'",
                (api_key, key),
            )

    def idempotency_records(self) -> list[dict[str, Any]]:
        with self.lock:
            rows = self.conn.execute(
                "SELECT key, method, path, state, status FROM idempotency ORDER BY created"
            ).fetchall()
        return [dict(zip(("key", "method", "path", "state", "status"), r, strict=True)) for r in rows]

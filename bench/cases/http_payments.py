"""Case 4 against the real payments webhook (``POST /api/v1/webhooks/payments/sandbox``): Stripe-signed
``payment_intent.*`` events for payment attempts generated with COPY, through the provider-event inbox
and ``apply`` on the attempt. Mixed in: duplicates (the same event id again: the inbox answers
``already_applied``) and out-of-order news (a capture reported before its authorization; the late
authorization is classified ``stale``). Every answer must be a 2xx.

The attempts' owner is ``bench.order``: no order subscriber reacts yet (orders are not on main), so
this measures the payments path alone; when orders land, owner_type ``orders.order`` adds its hook.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import random
import threading
import time
import uuid
from collections import deque
from datetime import UTC, datetime

import psycopg

from .. import db
from ..measure import Worker

PATH = "/api/v1/webhooks/payments/sandbox"
LABEL = "payments webhook (real endpoint: inbox + apply on PaymentAttempt)"
SECRET_SETTING = "STRIPE_WEBHOOK_SECRETS"
AMOUNT = 1000
DUPLICATES = 0.15
OUT_OF_ORDER = 0.15
EVENT_TYPES = {"requires_capture": "payment_intent.amount_capturable_updated", "succeeded": "payment_intent.succeeded"}


def generate_attempts(conn: psycopg.Connection, count: int) -> None:
    from payments.models import PaymentAttempt

    table = PaymentAttempt._meta.db_table
    conn.execute(f"TRUNCATE {table}, payments_providerevent RESTART IDENTITY CASCADE")
    now = datetime.now(UTC)
    columns = [
        "id",
        "state_version",
        "entered_state_at",
        "created_at",
        "updated_at",
        "state",
        "public_id",
        "owner_type",
        "owner_id",
        "sequence",
        "is_current",
        "amount",
        "currency",
        "payment_method",
        "provider",
        "provider_intent_id",
        "provider_status",
        "pending_operation",
        "decline_code",
        "last_error",
    ]
    rows = (
        [
            i,
            1,
            now,
            now,
            now,
            "requested",
            uuid.uuid4(),
            "bench.order",
            str(i),
            1,
            True,
            AMOUNT,
            "eur",
            "",
            "sandbox",
            f"pi_bench_{i}",
            "",
            "",
            "",
            "",
        ]
        for i in range(1, count + 1)
    )
    db._copy(conn, table, columns, rows)
    conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), %s)", [count + 1])
    conn.commit()


class AttemptPool:
    def __init__(self, count: int) -> None:
        ids = list(range(1, count + 1))
        random.Random(11).shuffle(ids)
        self._items = deque((i, "requested") for i in ids)
        self._lock = threading.Lock()

    def take(self) -> tuple[int, str]:
        with self._lock:
            if not self._items:
                raise RuntimeError("payment attempt pool exhausted")
            return self._items.popleft()

    def give_back(self, attempt_id: int, state: str) -> None:
        if state in ("requested", "authorized"):
            with self._lock:
                self._items.append((attempt_id, state))


def signed_event(attempt_id: int, status: str, event_id: str, secret: str) -> tuple[bytes, dict[str, str]]:
    intent = {
        "id": f"pi_bench_{attempt_id}",
        "object": "payment_intent",
        "status": status,
        "amount": AMOUNT,
        "amount_capturable": AMOUNT if status == "requires_capture" else 0,
        "amount_received": AMOUNT if status == "succeeded" else 0,
        "currency": "eur",
        "metadata": {},
        "created": int(time.time()),
    }
    body = json.dumps(
        {"id": event_id, "object": "event", "type": EVENT_TYPES[status], "data": {"object": intent}}
    ).encode()
    ts = int(time.time())
    mac = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return body, {"Content-Type": "application/json", "Stripe-Signature": f"t={ts},v1={mac}"}


class PaymentsWebhookWorker(Worker):
    def __init__(self, pool: AttemptPool, port: int, seed: int, failures: list[str]) -> None:
        from django.conf import settings

        self.pool, self.port, self.failures = pool, port, failures
        self.secret = list(getattr(settings, SECRET_SETTING))[0]
        self.rng = random.Random(seed)
        self.tag = f"{seed}-{random.randrange(1 << 30)}"
        self.sent: list[tuple[bytes, dict[str, str]]] = []
        self.late: list[int] = []  # captured before their authorization was reported

    def setup(self) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def _post(self, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
        try:
            self.conn.request("POST", PATH, body=body, headers=headers)
            response = self.conn.getresponse()
            raw = response.read()
        except (http.client.HTTPException, OSError):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            raise
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, {"raw": raw[:200].decode(errors="replace")}

    def _send(self, attempt_id: int, status: str) -> tuple[int, dict]:
        event = signed_event(attempt_id, status, f"evt_{self.tag}_{attempt_id}_{status}", self.secret)
        answer = self._post(*event)
        if 200 <= answer[0] < 300 and answer[1].get("result") == "applied":
            self.sent.append(event)
        return answer

    def op(self) -> str:
        r = self.rng.random()
        if self.late and r < 0.5:
            status, answer = self._send(self.late.pop(), "requires_capture")  # late authorization: stale
        elif r < DUPLICATES and self.sent:
            status, answer = self._post(*self.rng.choice(self.sent))  # same event id again
        else:
            attempt_id, state = self.pool.take()
            if r < DUPLICATES + OUT_OF_ORDER and state == "requested":
                status, answer = self._send(attempt_id, "succeeded")  # capture reported first
                self.late.append(attempt_id)
            else:
                status, answer = self._send(attempt_id, "requires_capture" if state == "requested" else "succeeded")
            self.pool.give_back(attempt_id, answer.get("state") or state)
        if not 200 <= status < 300:
            self.failures.append(f"{status} {answer}")
            return "non-2xx"
        return str(answer.get("result"))

    def teardown(self) -> None:
        self.conn.close()

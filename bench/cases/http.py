"""Case 4, the webhook path over HTTP: gunicorn on loopback, signed events at several concurrencies,
with duplicates (15%) and out-of-order events (15%) mixed in. Every answer must be a 2xx.

The target is ``subject.WEBHOOK``: today the bench's own signed endpoint in front of ``apply`` (the
payments webhook is not on main yet); switching to the real endpoint is a new ``Webhook`` there.
"""

from __future__ import annotations

import http.client
import json
import random
import sys
from collections.abc import Callable

from .. import processes
from ..measure import Row, Worker, fill_latency, run_concurrent
from ..pools import AggregatePool
from ..subject import SUBJECT, WEBHOOK

DUPLICATES = 0.15
OUT_OF_ORDER = 0.15
GUNICORN_WORKERS = 2
GUNICORN_THREADS = 8


class WebhookWorker(Worker):
    def __init__(self, pool: AggregatePool, port: int, seed: int, failures: list[str]) -> None:
        self.pool, self.port, self.failures = pool, port, failures
        self.rng = random.Random(seed)
        self.tag = random.randrange(1 << 30)
        self.sent: list[tuple[int, str, str]] = []
        self.path = WEBHOOK.path
        self.order = list(SUBJECT.forward)

    def setup(self) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def _post(self, order_id: int, event: str, identity: str) -> tuple[int, dict]:
        body, headers = WEBHOOK.build(order_id, event, identity)
        try:
            self.conn.request("POST", self.path, body=body, headers=headers)
            response = self.conn.getresponse()
            raw = response.read()
        except (http.client.HTTPException, OSError):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            raise
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = {"raw": raw[:200].decode(errors="replace")}
        return response.status, answer

    def op(self) -> str:
        r = self.rng.random()
        if r < DUPLICATES and self.sent:
            order_id, event, identity = self.rng.choice(self.sent)
            state = None
        else:
            order_id, state = self.pool.take()
            if r < DUPLICATES + OUT_OF_ORDER:
                # an event that belongs to another state: early (two steps ahead) or late (the first one)
                i = self.order.index(state)
                event = SUBJECT.forward[self.order[(i + 2) % len(self.order)]][0]
            else:
                event = SUBJECT.forward[state][0]
            identity = f"evt:{self.tag}:{order_id}:{event}"
        status, answer = self._post(order_id, event, identity)
        if state is not None:
            self.pool.give_back(order_id, answer.get("state", state) if status < 300 else state)
            if status < 300 and answer.get("result") == "applied":
                self.sent.append((order_id, event, identity))
        if not 200 <= status < 300:
            self.failures.append(f"{status} {answer}")
            return "non-2xx"
        return str(answer.get("result"))

    def teardown(self) -> None:
        self.conn.close()


def payments_webhook_available() -> bool:
    from django.urls import NoReverseMatch, reverse

    try:
        reverse("payments-webhook", kwargs={"provider": "sandbox"})
    except NoReverseMatch:
        return False
    return True


def run(
    pool: AggregatePool,
    *,
    concurrencies: tuple[int, ...],
    duration: float,
    log: Callable[[str], None],
    conn=None,
    attempts: int = 0,
) -> list[Row]:
    port = processes.free_port()
    server = processes.start(
        [
            str(processes.BIN / "gunicorn"),
            "config.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(GUNICORN_WORKERS),
            "--worker-class",
            "gthread",
            "--threads",
            str(GUNICORN_THREADS),
            "--keep-alive",
            "30",
            "--backlog",
            "256",
            "--log-level",
            "warning",
        ],
        log_name="gunicorn",
    )
    rows = []
    try:
        processes.wait_http(port, proc=server)
        log(
            f"gunicorn on 127.0.0.1:{port} ({GUNICORN_WORKERS} workers x {GUNICORN_THREADS} threads); "
            f"bench target: {WEBHOOK.label}"
        )
        if conn is not None and attempts and payments_webhook_available():
            from . import http_payments

            http_payments.generate_attempts(conn, attempts)
            attempt_pool = http_payments.AttemptPool(attempts)
            for c in concurrencies:
                failures: list[str] = []
                seconds, latencies, kinds = run_concurrent(
                    lambda n, f=failures: http_payments.PaymentsWebhookWorker(attempt_pool, port, 900 + n, f),
                    concurrency=c,
                    duration=duration,
                    warmup=min(1.0, duration / 5),
                )
                rows.append(_row("payments webhook (real)", c, seconds, latencies, kinds, failures))
        else:
            log("payments webhook endpoint not available: only the bench endpoint is measured")
        for c in concurrencies:
            failures: list[str] = []
            seconds, latencies, kinds = run_concurrent(
                lambda n, f=failures: WebhookWorker(pool, port, 500 + n, f),
                concurrency=c,
                duration=duration,
                warmup=min(1.0, duration / 5),
            )
            rows.append(_row("bench endpoint (signed event -> apply)", c, seconds, latencies, kinds, failures))
    finally:
        processes.stop(server)
    return rows


def _row(variant: str, c: int, seconds: float, latencies: list[float], kinds, failures: list[str]) -> Row:
    kinds.setdefault("non-2xx", 0)
    row = Row(
        case="4 http", variant=variant, concurrency=c, ops=sum(kinds.values()), seconds=seconds, kinds=dict(kinds)
    )
    row.notes = f"non-2xx={kinds['non-2xx']} " + " ".join(
        f"{k}={v}" for k, v in sorted(kinds.items()) if k != "non-2xx"
    )
    if failures:
        row.notes += f" first failure: {failures[0][:160]}"
        print(f"non-2xx answers at c{c}: {failures[:3]}", file=sys.stderr)
    return fill_latency(row, latencies)

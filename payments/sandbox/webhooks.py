"""Delivers events to the configured endpoint, signed as Stripe signs them, retried on non-2xx.

A delivery is signed when it is sent (``Stripe-Signature: t=<now>,v1=<hmac-sha256("t.body")>``), so
a retry carries a fresh timestamp, as Stripe's do. Behaviour that tests can change at run time:
``delay_seconds`` (hold every delivery back), ``duplicate`` (send each event this many extra times),
``hold`` (buffer events until ``release(order="reverse"|"forward")``: how tests deliver out of order).
"""

from __future__ import annotations

import dataclasses
import heapq
import hmac
import itertools
import json
import threading
import time
import urllib.error
import urllib.request
from hashlib import sha256
from typing import Any

from .ledger import Ledger


def sign(payload: bytes, secret: str, timestamp: int | None = None) -> str:
    """The ``Stripe-Signature`` header value for ``payload``."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    signed = f"{timestamp}.".encode() + payload
    digest = hmac.new(secret.encode(), signed, sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


@dataclasses.dataclass
class WebhookSettings:
    url: str | None = None
    secret: str = "whsec_sandbox"  # noqa: S105 - the sandbox's well-known default
    retry_base_seconds: float = 1.0
    retry_max_seconds: float = 60.0
    max_attempts: int = 8
    timeout_seconds: float = 10.0
    delay_seconds: float = 0.0
    duplicate: int = 0
    hold: bool = False


class WebhookDispatcher:
    def __init__(self, ledger: Ledger, settings: WebhookSettings) -> None:
        self.ledger = ledger
        self.settings = settings
        self._queue: list[tuple[float, int, str, int]] = []  # (due, seq, event_id, attempt)
        self._held: list[str] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._in_progress = 0
        self._workers = [
            threading.Thread(target=self._run, name=f"sandbox-webhooks-{i}", daemon=True) for i in range(4)
        ]
        for worker in self._workers:
            worker.start()

    # --- producers ----------------------------------------------------------------------------
    def enqueue(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        with self._cond:
            for event in events:
                if self.settings.hold:
                    self._held.append(event["id"])
                    continue
                copies = 1 + max(0, self.settings.duplicate)
                for _ in range(copies):
                    self._push(time.time() + self.settings.delay_seconds, event["id"], 1)
            self._cond.notify_all()

    def release(self, order: str = "forward") -> list[str]:
        """Send the held events now, one after another in arrival order or reversed; stop holding.

        The released events are delivered serially (each answered before the next is sent), so the
        receiver sees exactly the chosen order; failed ones go back to the normal retry queue.
        """
        with self._cond:
            held, self._held = self._held, []
            self.settings.hold = False
            if order == "reverse":
                held.reverse()
            self._in_progress += 1
        copies = 1 + max(0, self.settings.duplicate)

        def deliver_in_order() -> None:
            try:
                for event_id in held:
                    for _ in range(copies):
                        self._deliver(event_id, 1)
            finally:
                with self._cond:
                    self._in_progress -= 1
                    self._cond.notify_all()

        threading.Thread(target=deliver_in_order, name="sandbox-webhooks-release", daemon=True).start()
        return held

    def deliver_again(self, event_id: str) -> None:
        with self._cond:
            self._push(time.time(), event_id, 1)
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._queue.clear()
            self._held.clear()

    def idle(self) -> bool:
        with self._cond:
            return not self._queue and not self._in_progress

    def pending(self) -> dict[str, Any]:
        with self._cond:
            return {"queued": len(self._queue), "held": list(self._held), "in_progress": self._in_progress}

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _push(self, due: float, event_id: str, attempt: int) -> None:
        heapq.heappush(self._queue, (due, next(self._seq), event_id, attempt))

    # --- worker -------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._queue or self._queue[0][0] > time.time()):
                    timeout = (self._queue[0][0] - time.time()) if self._queue else None
                    self._cond.wait(timeout=timeout)
                if self._stopped:
                    return
                _, _, event_id, attempt = heapq.heappop(self._queue)
                self._in_progress += 1
            try:
                self._deliver(event_id, attempt)
            finally:
                with self._cond:
                    self._in_progress -= 1
                    self._cond.notify_all()

    def _deliver(self, event_id: str, attempt: int) -> None:
        url = self.settings.url
        event = self.ledger.event(event_id)
        if not url or event is None:
            return
        body = json.dumps(event, indent=2).encode()
        request = urllib.request.Request(  # noqa: S310 - the URL is the configured http(s) endpoint
            url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json; charset=utf-8",
                "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
                "Stripe-Signature": sign(body, self.settings.secret),
            },
        )
        status: int | None = None
        error: str | None = None
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout_seconds) as response:  # noqa: S310  # noqa: S310
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
            error = exc.read()[:500].decode(errors="replace")
        except (OSError, urllib.error.URLError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        self.ledger.record_delivery(event_id, attempt, url, status, error)
        if status is not None and 200 <= status < 300:
            return
        if attempt >= self.settings.max_attempts:
            return
        backoff = min(
            self.settings.retry_base_seconds * (2 ** (attempt - 1)), self.settings.retry_max_seconds
        )
        with self._cond:
            self._push(time.time() + backoff, event_id, attempt + 1)
            self._cond.notify_all()

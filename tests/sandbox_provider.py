"""Pytest fixtures: the sandbox payment provider as a real subprocess on a free port.

Reuse from any app's conftest.py:

    from tests.sandbox_provider import sandbox, sandbox_process  # noqa: F401

``sandbox_process`` (session) starts ``python -m payments.sandbox --port 0`` with its own SQLite ledger
and reads the announced URL; ``sandbox`` (per test) resets the ledger, faults and webhook behaviour and
points ``payments.providers.get_provider()`` at it, so the app's adapter talks to it over HTTP.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

REPO_ROOT = Path(__file__).resolve().parent.parent
SANDBOX_API_KEY = "sk_test_ledgerflow_tests"
SANDBOX_WEBHOOK_SECRET = "whsec_ledgerflow_tests"


class SandboxHandle:
    """A thin client for the sandbox's control endpoints."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.api_key = SANDBOX_API_KEY
        self.webhook_secret = SANDBOX_WEBHOOK_SECRET
        self.http = requests.Session()

    def _control(self, method: str, path: str, json: Any = None) -> Any:
        response = self.http.request(method, f"{self.url}/_sandbox/{path}", json=json, timeout=10)
        response.raise_for_status()
        return response.json()

    def reset(self) -> None:
        self._control("POST", "reset")
        self.configure(
            webhook_url=None,
            webhook_secret=self.webhook_secret,
            webhook_retry_base_seconds=0.2,
            webhook_max_attempts=8,
            refund_initial_status="succeeded",
        )

    def configure(self, **settings: Any) -> dict[str, Any]:
        return self._control("POST", "config", settings)

    def fault(self, op: str, action: str, **options: Any) -> dict[str, Any]:
        return self._control("POST", "faults", {"op": op, "action": action, **options})["faults"][0]

    def webhooks(self, **behaviour: Any) -> dict[str, Any]:
        return self._control("POST", "webhooks", behaviour)

    def release_webhooks(self, order: str = "forward") -> list[str]:
        return self._control("POST", "webhooks/release", {"order": order})["released"]

    def deliver_again(self, event_id: str) -> None:
        self._control("POST", f"events/{event_id}/deliver")

    def settle_refund(self, refund_id: str, status: str) -> dict[str, Any]:
        return self._control("POST", f"refunds/{refund_id}/settle", {"status": status})

    def ledger(self) -> dict[str, Any]:
        return self._control("GET", "ledger")

    def events(self, event_type: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.ledger()["events"] if event_type is None or e["type"] == event_type]

    def wait_for(self, predicate, *, timeout: float = 20.0, what: str = "condition") -> dict[str, Any]:
        """Poll the ledger until ``predicate(ledger)`` holds (waiting for the sandbox's own threads)."""
        deadline = time.monotonic() + timeout
        while True:
            ledger = self.ledger()
            if predicate(ledger):
                return ledger
            if time.monotonic() > deadline:
                raise AssertionError(f"sandbox never reached: {what}; ledger: {ledger['deliveries']}")
            time.sleep(0.05)

    def wait_webhooks_idle(self, timeout: float = 20.0) -> dict[str, Any]:
        return self.wait_for(
            lambda ledger: ledger["webhooks"]["idle"] and not ledger["webhooks"]["held"],
            timeout=timeout,
            what="webhook queue drained",
        )

    def provider(self, **kwargs: Any):
        from payments.providers.stripe_adapter import StripeProvider

        return StripeProvider(api_key=self.api_key, api_base=self.url, **kwargs)


def start_sandbox(db_path: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "payments.sandbox",
            "--port",
            "0",
            "--db",
            str(db_path),
            "--api-key",
            SANDBOX_API_KEY,
            "--webhook-secret",
            SANDBOX_WEBHOOK_SECRET,
            "--webhook-retry-base-seconds",
            "0.2",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    line = process.stdout.readline() if process.stdout else ""
    if "listening on" not in line:
        process.kill()
        raise RuntimeError(f"sandbox provider did not start: {line!r}")
    url = line.strip().split()[-1]
    deadline = time.monotonic() + 15
    while True:
        try:
            if requests.get(f"{url}/_sandbox/health", timeout=1).ok:
                return process, url
        except requests.ConnectionError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("sandbox provider never answered its health check")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def sandbox_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxHandle]:
    process, url = start_sandbox(tmp_path_factory.mktemp("sandbox") / "sandbox-provider.sqlite3")
    try:
        yield SandboxHandle(url)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def sandbox(sandbox_process: SandboxHandle, settings) -> Iterator[SandboxHandle]:
    """A clean sandbox, with the app's settings and provider pointed at it."""
    from payments import providers

    sandbox_process.reset()
    settings.PAYMENT_PROVIDER = "sandbox"
    settings.STRIPE_API_BASE = sandbox_process.url
    settings.STRIPE_API_KEY = sandbox_process.api_key
    settings.STRIPE_WEBHOOK_SECRETS = [sandbox_process.webhook_secret]
    providers.set_provider_override(None)
    yield sandbox_process
    providers.set_provider_override(None)
    sandbox_process.reset()

"""The station protocol, client side (urllib only). See docs/printing.md for the server side."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

USER_AGENT = "ledgerflow-station"


class ServerUnavailable(Exception):
    """Network trouble or a 5xx: try again later; nothing is lost (the ledger still holds it)."""


class ServerRefused(Exception):
    """A 4xx answer: retrying the same request will not help."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        super().__init__(f"HTTP {status}: {error.get('code', '')} {error.get('message', body)}")
        self.status = status
        self.body = body
        self.code = error.get("code", "")


class StationClient:
    def __init__(self, api: str, token: str, *, timeout: float = 10.0) -> None:
        if not api.startswith(("http://", "https://")):
            raise ValueError(f"--api must be an http(s) URL, not {api!r}")
        self.api = api.rstrip("/")
        if not self.api.endswith("/api/v1"):
            self.api += "/api/v1"
        self.token = token
        self.timeout = timeout

    def _post(
        self, path: str, body: dict[str, Any], *, timeout: float | None = None
    ) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode()
        # Only http(s) URLs reach here: the base URL is checked in __init__.
        request = urllib.request.Request(  # noqa: S310
            f"{self.api}{path}",
            data=data,
            method="POST",
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": USER_AGENT,
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:  # noqa: S310
                raw = response.read()
                return response.status, (json.loads(raw) if raw else {})
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                parsed = json.loads(raw) if raw else {}
            except ValueError:
                parsed = {"raw": raw.decode("utf-8", "replace")[:500]}
            if exc.code >= 500:
                raise ServerUnavailable(f"HTTP {exc.code}") from exc
            raise ServerRefused(exc.code, parsed) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ServerUnavailable(str(exc)) from exc

    def heartbeat(self, info: dict[str, Any]) -> dict[str, Any]:
        return self._post("/station/heartbeat", info)[1]

    def claim(self, wait_seconds: float) -> dict[str, Any] | None:
        """Long poll: the next job under a fresh lease, or None when none arrived within ``wait_seconds``."""
        _, body = self._post(
            "/station/claim", {"wait_seconds": wait_seconds}, timeout=wait_seconds + self.timeout
        )
        return body.get("job")

    def report(self, job_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._post(f"/station/jobs/{job_id}/report", body)[1]

    def replay_ledger(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self._post("/station/ledger", {"entries": entries}, timeout=max(self.timeout, 30))[1].get(
            "results", []
        )

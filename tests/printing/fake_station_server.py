"""A scripted stand-in for the server side of the station protocol (no Django, no database).

Used by the station program's own tests to drive situations the real server reaches only through
time (an offer repeated after a lease ran out, a receipt answered ``stale``) and to look at the
station's ledger at the very moment a report arrives. The real server is exercised end to end in
test_station_end_to_end.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeStationServer:
    def __init__(self, token: str = "st_test_secret") -> None:  # noqa: S107 - a test token
        self.token = token
        self.offers: list[dict[str, Any]] = []
        self.reports: list[tuple[str, dict[str, Any]]] = []
        self.ledger_replays: list[list[dict[str, Any]]] = []
        self.heartbeats: list[dict[str, Any]] = []
        self.on_report: Callable[[str, dict[str, Any]], dict[str, Any] | None] | None = None
        self.fail_next_reports = 0  # answer this many reports with 503 (the server is "down")
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                if self.headers.get("Authorization") != f"Bearer {server.token}":
                    return self._send(401, {"error": {"code": "E_UNAUTHENTICATED", "message": "bad token"}})
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                path = self.path.removeprefix("/api/v1")
                with server.lock:
                    if path == "/station/heartbeat":
                        server.heartbeats.append(body)
                        return self._send(200, {"connection_status": "connected"})
                    if path == "/station/claim":
                        job = server.offers.pop(0) if server.offers else None
                        return self._send(200, {"job": job})
                    if path == "/station/ledger":
                        server.ledger_replays.append(body["entries"])
                        return self._send(
                            200,
                            {
                                "results": [
                                    {
                                        "job_id": e["job_id"],
                                        "event_id": e["event_id"],
                                        "result": "applied",
                                        "state": e["kind"],
                                    }
                                    for e in body["entries"]
                                ]
                            },
                        )
                    if path.startswith("/station/jobs/") and path.endswith("/report"):
                        if server.fail_next_reports > 0:
                            server.fail_next_reports -= 1
                            return self._send(503, {"error": {"code": "E_UNAVAILABLE", "message": "down"}})
                        job_id = path.split("/")[3]
                        server.reports.append((job_id, body))
                        answer = server.on_report(job_id, body) if server.on_report else None
                        return self._send(200, answer or {"result": "applied", "state": body["kind"]})
                return self._send(404, {"error": {"code": "E_NOT_FOUND", "message": path}})

            def _send(self, status, payload):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeStationServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def offer(
        self,
        job_id: int,
        content: bytes,
        *,
        lease: str,
        content_type: str = "text",
        title: str = "t",
        copies: int = 1,
    ) -> None:
        self.offers.append(
            {
                "id": job_id,
                "lease_token": lease,
                "fencing_token": len(self.offers) + 1,
                "title": title,
                "copies": copies,
                "content_type": content_type,
                "content_base64": base64.b64encode(content).decode(),
                "content_sha256": hashlib.sha256(content).hexdigest(),
            }
        )

    def kinds(self, job_id: int | str) -> list[str]:
        return [b["kind"] for j, b in self.reports if j == str(job_id)]


def ledger_phase(path: str, job_id: int | str) -> str | None:
    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT phase FROM jobs WHERE job_id = ?", (str(job_id),)).fetchone()
        return row[0] if row else None
    finally:
        db.close()

"""The sandbox's HTTP face: Stripe's routes, Stripe's idempotency, fault injection, control endpoints.

Control endpoints (no auth; the sandbox binds to localhost and is a test device):
  GET  /_sandbox/health                      → {"ok": true}
  GET  /_sandbox/ledger                      → intents, charges, refunds, events, deliveries, keys, faults
  POST /_sandbox/reset                       → wipe the ledger, faults and queued webhooks
  POST /_sandbox/config                      {webhook_url, webhook_secret, webhook_retry_base_seconds,
                                              webhook_max_attempts, refund_initial_status}
  POST /_sandbox/faults                      one fault or {"faults": [...]}; DELETE clears; GET lists
      {"op": "refund.create", "action": "drop_response"}          effect done, connection closed unanswered
      {"op": "payment_intent.capture", "action": "delay", "seconds": 3, "when": "after"|"before"}
      {"op": "payment_intent.cancel", "action": "capture_wins"}   a capture lands just before the cancel
      {"op": "*", "action": "error", "status": 500}                refused before any effect
      optional "times" (default 1; null = every time)
  POST /_sandbox/webhooks                    {delay_seconds, duplicate, hold}: delivery behaviour
  POST /_sandbox/webhooks/release            {"order": "forward"|"reverse"}: send held events
  POST /_sandbox/events/<evt_id>/deliver     send one event again (a duplicate delivery)
  POST /_sandbox/refunds/<re_id>/settle      {"status": "succeeded"|"failed"}: finish a pending refund
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from . import forms, provider
from .ledger import Ledger, StripeError, invalid, new_id, params_hash
from .webhooks import WebhookDispatcher, WebhookSettings

logger = logging.getLogger("payments.sandbox")

MAX_IDEMPOTENCY_KEY_LENGTH = 255

Route = tuple[str, str, re.Pattern[str]]
ROUTES: list[Route] = [
    ("POST", "payment_intent.create", re.compile(r"^/v1/payment_intents$")),
    ("GET", "payment_intent.list", re.compile(r"^/v1/payment_intents$")),
    ("GET", "payment_intent.retrieve", re.compile(r"^/v1/payment_intents/(?P<id>[^/]+)$")),
    ("POST", "payment_intent.confirm", re.compile(r"^/v1/payment_intents/(?P<id>[^/]+)/confirm$")),
    ("POST", "payment_intent.capture", re.compile(r"^/v1/payment_intents/(?P<id>[^/]+)/capture$")),
    ("POST", "payment_intent.cancel", re.compile(r"^/v1/payment_intents/(?P<id>[^/]+)/cancel$")),
    ("POST", "refund.create", re.compile(r"^/v1/refunds$")),
    ("GET", "refund.list", re.compile(r"^/v1/refunds$")),
    ("GET", "refund.retrieve", re.compile(r"^/v1/refunds/(?P<id>[^/]+)$")),
]


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[dict[str, Any]] = []

    def add(self, fault: dict[str, Any]) -> dict[str, Any]:
        if fault.get("action") not in ("delay", "drop_response", "capture_wins", "error"):
            raise invalid(f"Unknown fault action: {fault.get('action')}", param="action")
        if not fault.get("op"):
            raise invalid("A fault needs an op (e.g. refund.create, or *)", param="op")
        item = {"id": new_id("flt", 12), "times": 1, **fault}
        with self._lock:
            self._items.append(item)
        return item

    def take(self, op: str, actions: tuple[str, ...]) -> dict[str, Any] | None:
        """Consume the first armed fault for ``op`` among ``actions``."""
        with self._lock:
            for item in self._items:
                if item["action"] in actions and item["op"] in (op, "*"):
                    if item["times"] is not None:
                        item["times"] -= 1
                        if item["times"] <= 0:
                            self._items.remove(item)
                    return dict(item)
        return None

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(i) for i in self._items]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class SandboxServer:
    """Owns the ledger, the faults, the webhook dispatcher and the HTTP server."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 12111,
        db_path: str = ":memory:",
        api_keys: list[str] | None = None,
        webhook_url: str | None = None,
        webhook_secret: str = "whsec_sandbox",  # noqa: S107 - a test device's default
        webhook_retry_base_seconds: float = 1.0,
    ) -> None:
        self.ledger = Ledger(db_path)
        self.faults = Faults()
        self.api_keys = set(api_keys or [])
        self.refund_initial_status = "succeeded"
        self.webhook_settings = WebhookSettings(
            url=webhook_url, secret=webhook_secret, retry_base_seconds=webhook_retry_base_seconds
        )
        self.webhooks = WebhookDispatcher(self.ledger, self.webhook_settings)
        handler = type("BoundHandler", (Handler,), {"sandbox": self})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> SandboxServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="sandbox-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.webhooks.stop()
        self.httpd.shutdown()
        self.httpd.server_close()

    def authorized(self, api_key: str) -> bool:
        if self.api_keys:
            return api_key in self.api_keys
        return api_key.startswith("sk_test_")

    def reset(self) -> None:
        self.faults.clear()
        self.webhooks.clear()
        self.webhook_settings.delay_seconds = 0.0
        self.webhook_settings.duplicate = 0
        self.webhook_settings.hold = False
        self.refund_initial_status = "succeeded"
        self.ledger.reset()

    def snapshot(self) -> dict[str, Any]:
        with self.ledger.lock:
            return {
                "payment_intents": self.ledger.all("payment_intent"),
                "charges": self.ledger.all("charge"),
                "refunds": self.ledger.all("refund"),
                "events": self.ledger.events(),
                "deliveries": self.ledger.deliveries(),
                "idempotency_keys": self.ledger.idempotency_records(),
                "faults": self.faults.list(),
                "webhooks": {
                    **self.webhooks.pending(),
                    "url": self.webhook_settings.url,
                    "idle": self.webhooks.idle(),
                },
            }


class DropResponse(Exception):  # noqa: N818 - a control-flow signal
    """Close the connection without answering (the acknowledgement is lost)."""


class Handler(BaseHTTPRequestHandler):
    sandbox: SandboxServer
    protocol_version = "HTTP/1.1"
    server_version = "LedgerflowSandbox/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        logger.debug("%s " + format, self.address_string(), *args)

    # --- plumbing -------------------------------------------------------------------------------
    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: dict[str, Any] | str, headers: dict[str, str] | None = None) -> None:
        raw = body if isinstance(body, str) else json.dumps(body, indent=2)
        data = raw.encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timed out) already
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        body = self._read_body() if method in ("POST", "DELETE") else b""
        try:
            if split.path.startswith("/_sandbox/"):
                self._control(method, split.path, body)
            else:
                self._api(method, split.path, split.query, body)
        except DropResponse:
            self.close_connection = True
        except StripeError as error:
            self._send(error.status, error.as_json())
        except Exception as exc:  # a sandbox bug: answer like Stripe's api_error, keep serving
            logger.exception("sandbox failure")
            self._send(500, {"error": {"type": "api_error", "message": f"Sandbox failure: {exc}"}})

    # --- Stripe API -----------------------------------------------------------------------------
    def _api(self, method: str, path: str, query: str, body: bytes) -> None:
        sandbox = self.sandbox
        request_id = new_id("req", 14)
        auth = self.headers.get("Authorization", "")
        api_key = auth[7:].strip() if auth.startswith("Bearer ") else ""
        if not api_key:
            raise StripeError(
                401,
                "invalid_request_error",
                "You did not provide an API key. You need to provide your API key in the "
                "Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').",
            )
        if not sandbox.authorized(api_key):
            raise StripeError(
                401,
                "invalid_request_error",
                f"Invalid API Key provided: {api_key[:8]}{'*' * max(0, len(api_key) - 12)}{api_key[-4:]}",
            )
        op, match = _route(method, path)
        try:
            params = forms.decode(body.decode() if method == "POST" else query)
        except (ValueError, UnicodeDecodeError) as exc:
            raise invalid(f"Invalid request body: {exc}")

        key = self.headers.get("Idempotency-Key") if method == "POST" else None
        if key is not None and (len(key) > MAX_IDEMPOTENCY_KEY_LENGTH or not key):
            raise invalid(
                f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} characters.",
                param="Idempotency-Key",
            )
        base_headers = {"Request-Id": request_id, "Stripe-Version": self.headers.get("Stripe-Version", "")}
        if key is not None:
            base_headers["Idempotency-Key"] = key
            verdict, status, stored = sandbox.ledger.idempotency_claim(
                api_key, key, method, path, params_hash(method, path, params)
            )
            if verdict == "mismatch":
                raise StripeError(
                    400,
                    "idempotency_error",
                    f"Keys for idempotent requests can only be used with the same parameters they were first "
                    f"used with. Try using a key other than '{key}' if you meant to execute a different "
                    "request.",
                )
            if verdict == "in_flight":
                raise StripeError(
                    409,
                    "invalid_request_error",
                    "There is currently another in-progress request using this Idempotent Key (that probably "
                    "means you submitted twice, and the other request is still going through): "
                    f"{key}. Please try again later.",
                    code="idempotency_key_in_use",
                )
            if verdict == "replay":
                self._send(status, stored, {**base_headers, "Idempotent-Replayed": "true"})
                return

        request_info = {"id": request_id, "idempotency_key": key}
        try:
            before = (
                sandbox.faults.take(op, ("delay", "error"))
                if method == "POST"
                else sandbox.faults.take(op, ("delay",))
            )
            if before and before["action"] == "delay" and before.get("when", "after") == "before":
                time.sleep(float(before.get("seconds", 1)))
            if before and before["action"] == "error":
                raise StripeError(
                    int(before.get("status", 500)),
                    "api_error",
                    "An unexpected error occurred (injected by the sandbox).",
                    validation=True,
                )
            status, answer, events = self._execute(op, match, params, request_info, api_key, key)
        except StripeError as error:
            if key is not None and error.validation:
                sandbox.ledger.idempotency_release(api_key, key)
            raise
        except BaseException:
            if key is not None:
                sandbox.ledger.idempotency_release(api_key, key)
            raise
        sandbox.webhooks.enqueue(events)

        if before and before["action"] == "delay" and before.get("when", "after") == "after":
            time.sleep(float(before.get("seconds", 1)))
        if method == "POST" and sandbox.faults.take(op, ("drop_response",)):
            raise DropResponse()
        self._send(status, answer, base_headers)

    def _execute(
        self,
        op: str,
        match: re.Match[str],
        params: dict[str, Any],
        request_info: dict[str, Any],
        api_key: str,
        key: str | None,
    ) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
        """Run the operation and save its answer under the idempotency key in one transaction."""
        sandbox = self.sandbox
        ledger = sandbox.ledger
        object_id = match.groupdict().get("id", "")
        operations: dict[str, Callable[[], dict[str, Any]]] = {
            "payment_intent.create": lambda: provider.payment_intent_create(ledger, params, request_info),
            "payment_intent.list": lambda: provider.payment_intent_list(ledger, params),
            "payment_intent.retrieve": lambda: provider.payment_intent_retrieve(ledger, object_id),
            "payment_intent.confirm": lambda: provider.payment_intent_confirm(
                ledger, object_id, params, request_info
            ),
            "payment_intent.capture": lambda: provider.payment_intent_capture(
                ledger, object_id, params, request_info
            ),
            "payment_intent.cancel": lambda: provider.payment_intent_cancel(
                ledger,
                object_id,
                params,
                request_info,
                capture_wins=sandbox.faults.take(op, ("capture_wins",)) is not None,
            ),
            "refund.create": lambda: provider.refund_create(
                ledger, params, request_info, initial_status=sandbox.refund_initial_status
            ),
            "refund.list": lambda: provider.refund_list(ledger, params),
            "refund.retrieve": lambda: provider.refund_retrieve(ledger, object_id),
        }
        with ledger.transaction() as events:
            try:
                status, answer = 200, operations[op]()
            except StripeError as error:
                if error.validation or not (error.commit or key):
                    raise
                status, answer = error.status, error.as_json()
            if key is not None:
                ledger.idempotency_store(api_key, key, status, json.dumps(answer, indent=2))
        return status, answer, list(events)

    # --- control --------------------------------------------------------------------------------
    def _control(self, method: str, path: str, body: bytes) -> None:
        sandbox = self.sandbox
        try:
            data = json.loads(body) if body.strip() else {}
        except json.JSONDecodeError as exc:
            raise invalid(f"Invalid JSON: {exc}")
        if (method, path) == ("GET", "/_sandbox/health"):
            return self._send(200, {"ok": True, "url": sandbox.url})
        if (method, path) == ("GET", "/_sandbox/ledger"):
            return self._send(200, sandbox.snapshot())
        if (method, path) == ("POST", "/_sandbox/reset"):
            sandbox.reset()
            return self._send(200, {"ok": True})
        if (method, path) == ("POST", "/_sandbox/config"):
            settings = sandbox.webhook_settings
            if "webhook_url" in data:
                settings.url = data["webhook_url"]
            if "webhook_secret" in data:
                settings.secret = data["webhook_secret"]
            if "webhook_retry_base_seconds" in data:
                settings.retry_base_seconds = float(data["webhook_retry_base_seconds"])
            if "webhook_max_attempts" in data:
                settings.max_attempts = int(data["webhook_max_attempts"])
            if "refund_initial_status" in data:
                if data["refund_initial_status"] not in ("succeeded", "pending"):
                    raise invalid(
                        "refund_initial_status is succeeded or pending", param="refund_initial_status"
                    )
                sandbox.refund_initial_status = data["refund_initial_status"]
            return self._send(
                200, {"webhook_url": settings.url, "refund_initial_status": sandbox.refund_initial_status}
            )
        if path == "/_sandbox/faults":
            if method == "GET":
                return self._send(200, {"faults": sandbox.faults.list()})
            if method == "DELETE":
                sandbox.faults.clear()
                return self._send(200, {"faults": []})
            items = data.get("faults", [data]) if isinstance(data, dict) else data
            added = [sandbox.faults.add(item) for item in items]
            return self._send(200, {"faults": added})
        if (method, path) == ("POST", "/_sandbox/webhooks"):
            settings = sandbox.webhook_settings
            if "delay_seconds" in data:
                settings.delay_seconds = float(data["delay_seconds"])
            if "duplicate" in data:
                settings.duplicate = int(data["duplicate"])
            if "hold" in data:
                settings.hold = bool(data["hold"])
            return self._send(
                200,
                {
                    "delay_seconds": settings.delay_seconds,
                    "duplicate": settings.duplicate,
                    "hold": settings.hold,
                },
            )
        if (method, path) == ("POST", "/_sandbox/webhooks/release"):
            released = sandbox.webhooks.release(order=data.get("order", "forward"))
            return self._send(200, {"released": released})
        match = re.match(r"^/_sandbox/events/(?P<id>[^/]+)/deliver$", path)
        if match and method == "POST":
            if sandbox.ledger.event(match["id"]) is None:
                raise invalid(f"No such event: '{match['id']}'", code="resource_missing", status=404)
            sandbox.webhooks.deliver_again(match["id"])
            return self._send(200, {"queued": match["id"]})
        match = re.match(r"^/_sandbox/refunds/(?P<id>[^/]+)/settle$", path)
        if match and method == "POST":
            with sandbox.ledger.transaction() as events:
                refund = provider.refund_settle(sandbox.ledger, match["id"], data.get("status", "succeeded"))
            sandbox.webhooks.enqueue(list(events))
            return self._send(200, refund)
        raise invalid(f"Unrecognized sandbox control request ({method}: {path})", status=404)


def _route(method: str, path: str) -> tuple[str, re.Match[str]]:
    for route_method, op, pattern in ROUTES:
        match = pattern.match(path)
        if match and route_method == method:
            return op, match
    raise invalid(
        f"Unrecognized request URL ({method}: {path}). Please see https://stripe.com/docs or we can "
        "help at https://support.stripe.com/.",
        status=404,
    )


def serve(
    *,
    host: str,
    port: int,
    db_path: str,
    api_keys: list[str] | None = None,
    webhook_url: str | None = None,
    webhook_secret: str = "whsec_sandbox",  # noqa: S107 - a test device's default
    webhook_retry_base_seconds: float = 1.0,
    announce: Callable[[str], None] = print,
) -> None:
    """Run the sandbox in the foreground until interrupted."""
    server = SandboxServer(
        host=host,
        port=port,
        db_path=db_path,
        api_keys=api_keys,
        webhook_url=webhook_url,
        webhook_secret=webhook_secret,
        webhook_retry_base_seconds=webhook_retry_base_seconds,
    )
    announce(f"sandbox provider listening on {server.url}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()

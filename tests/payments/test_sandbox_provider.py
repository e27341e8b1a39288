"""The sandbox provider over real HTTP: Stripe's idempotency rules, errors, signed webhooks, faults."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
import stripe

CREATE = {
    "amount": "1500",
    "currency": "eur",
    "capture_method": "manual",
    "confirm": "true",
    "payment_method": "pm_card_visa",
    "metadata[attempt]": "att_1",
}


def post(sandbox, path, data, key=None, api_key=None):
    headers = {"Authorization": f"Bearer {api_key or sandbox.api_key}"}
    if key:
        headers["Idempotency-Key"] = key
    return requests.post(f"{sandbox.url}{path}", data=data, headers=headers, timeout=10)


def get(sandbox, path, params=None):
    return requests.get(
        f"{sandbox.url}{path}",
        params=params,
        headers={"Authorization": f"Bearer {sandbox.api_key}"},
        timeout=10,
    )


# --- idempotency --------------------------------------------------------------------------------
def test_same_key_and_params_replays_the_first_answer(sandbox):
    first = post(sandbox, "/v1/payment_intents", CREATE, key="key-a")
    second = post(sandbox, "/v1/payment_intents", CREATE, key="key-a")

    assert first.status_code == second.status_code == 200
    assert second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert len(sandbox.ledger()["payment_intents"]) == 1


def test_same_key_with_different_params_is_an_idempotency_error(sandbox):
    post(sandbox, "/v1/payment_intents", CREATE, key="key-b")

    answer = post(sandbox, "/v1/payment_intents", {**CREATE, "amount": "1600"}, key="key-b")

    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "idempotency_error"
    assert len(sandbox.ledger()["payment_intents"]) == 1


def test_same_key_on_another_endpoint_is_an_idempotency_error(sandbox):
    intent = post(sandbox, "/v1/payment_intents", CREATE, key="key-c").json()

    answer = post(sandbox, f"/v1/payment_intents/{intent['id']}/capture", {}, key="key-c")

    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "idempotency_error"
    assert get(sandbox, f"/v1/payment_intents/{intent['id']}").json()["status"] == "requires_capture"


def test_a_request_while_the_same_key_is_in_flight_gets_409(sandbox):
    sandbox.fault("payment_intent.create", "delay", seconds=3, when="before")
    first: dict = {}
    worker = threading.Thread(
        target=lambda: first.update(r=post(sandbox, "/v1/payment_intents", CREATE, key="key-d"))
    )
    worker.start()
    sandbox.wait_for(
        lambda ledger: any(k["key"] == "key-d" for k in ledger["idempotency_keys"]), what="key claimed"
    )

    concurrent = post(sandbox, "/v1/payment_intents", CREATE, key="key-d")
    worker.join()

    assert concurrent.status_code == 409
    assert concurrent.json()["error"]["code"] == "idempotency_key_in_use"
    assert first["r"].status_code == 200
    assert len(sandbox.ledger()["payment_intents"]) == 1
    assert post(sandbox, "/v1/payment_intents", CREATE, key="key-d").json()["id"] == first["r"].json()["id"]


def test_a_decline_is_saved_under_its_key_and_replayed(sandbox):
    declined = {**CREATE, "payment_method": "pm_card_chargeDeclined"}

    first = post(sandbox, "/v1/payment_intents", declined, key="key-e")
    second = post(sandbox, "/v1/payment_intents", declined, key="key-e")

    assert first.status_code == second.status_code == 402
    assert first.json() == second.json()
    assert first.json()["error"]["type"] == "card_error"
    assert first.json()["error"]["payment_intent"]["status"] == "requires_payment_method"
    assert [e["type"] for e in sandbox.events()] == [
        "payment_intent.created",
        "payment_intent.payment_failed",
    ]


def test_a_request_refused_by_validation_saves_nothing_under_its_key(sandbox):
    refused = post(sandbox, "/v1/payment_intents", {**CREATE, "amount": ""}, key="key-f")
    accepted = post(sandbox, "/v1/payment_intents", {**CREATE, "amount": ""} | {"amount": "900"}, key="key-f")

    assert refused.status_code == 400
    assert refused.json()["error"] == {
        **refused.json()["error"],
        "type": "invalid_request_error",
        "code": "parameter_missing",
        "param": "amount",
    }
    assert accepted.status_code == 200


# --- auth and errors ----------------------------------------------------------------------------
def test_requests_without_a_valid_secret_key_are_refused(sandbox):
    missing = requests.post(f"{sandbox.url}/v1/payment_intents", data=CREATE, timeout=10)
    wrong = post(sandbox, "/v1/payment_intents", CREATE, api_key="sk_test_someone_else")

    assert missing.status_code == wrong.status_code == 401
    assert wrong.json()["error"]["type"] == "invalid_request_error"
    assert sandbox.ledger()["payment_intents"] == []


def test_unknown_objects_and_parameters_are_stripe_errors(sandbox):
    missing = get(sandbox, "/v1/payment_intents/pi_missing")
    unknown = post(sandbox, "/v1/payment_intents", {**CREATE, "colour": "blue"}, key="key-g")

    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "resource_missing"
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == "parameter_unknown"


def test_refunds_cannot_exceed_the_captured_amount(sandbox):
    intent = post(sandbox, "/v1/payment_intents", CREATE, key="k1").json()
    post(sandbox, f"/v1/payment_intents/{intent['id']}/capture", {}, key="k2")

    assert post(sandbox, "/v1/refunds", {"payment_intent": intent["id"], "amount": "1000"}, key="k3").ok
    too_much = post(sandbox, "/v1/refunds", {"payment_intent": intent["id"], "amount": "501"}, key="k4")

    assert too_much.status_code == 400
    assert too_much.json()["error"]["code"] == "amount_too_large"


# --- webhooks -----------------------------------------------------------------------------------
class Receiver:
    """A local endpoint recording what the sandbox delivers; answers the statuses it is told to."""

    def __init__(self) -> None:
        self.received: list[tuple[dict, str, bytes]] = []
        self.statuses: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((json.loads(body), self.headers["Stripe-Signature"], body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def types(self) -> list[str]:
        return [event["type"] for event, _, _ in self.received]


@pytest.fixture
def receiver(sandbox):
    r = Receiver()
    sandbox.configure(webhook_url=r.url)
    yield r
    r.server.shutdown()


def test_events_are_signed_like_stripe_and_verify_with_the_sdk(sandbox, receiver):
    post(sandbox, "/v1/payment_intents", CREATE, key="w1")
    sandbox.wait_webhooks_idle()

    assert sorted(receiver.types()) == ["payment_intent.amount_capturable_updated", "payment_intent.created"]
    for event, signature, body in receiver.received:
        assert event["id"].startswith("evt_") and event["object"] == "event"
        assert event["data"]["object"]["object"] == "payment_intent"
        stripe.WebhookSignature.verify_header(body.decode(), signature, sandbox.webhook_secret, tolerance=300)
        with pytest.raises(stripe.SignatureVerificationError):
            stripe.WebhookSignature.verify_header(body.decode(), signature, "whsec_other", tolerance=300)


def test_a_failed_delivery_is_retried_until_acknowledged(sandbox, receiver):
    receiver.statuses = [500, 503]

    post(sandbox, "/v1/payment_intents", {**CREATE, "confirm": "false"}, key="w2")
    ledger = sandbox.wait_webhooks_idle()

    assert [d["status_code"] for d in ledger["deliveries"]] == [500, 503, 200]
    assert [d["attempt"] for d in ledger["deliveries"]] == [1, 2, 3]
    assert len({event["id"] for event, _, _ in receiver.received}) == 1


def test_duplicate_delivery_sends_the_same_event_twice(sandbox, receiver):
    sandbox.webhooks(duplicate=1)

    post(sandbox, "/v1/payment_intents", {**CREATE, "confirm": "false"}, key="w3")
    sandbox.wait_webhooks_idle()

    ids = [event["id"] for event, _, _ in receiver.received]
    assert len(ids) == 2 and ids[0] == ids[1]


def test_held_events_can_be_released_in_reverse_order(sandbox, receiver):
    sandbox.webhooks(hold=True)
    intent = post(sandbox, "/v1/payment_intents", CREATE, key="w4").json()
    post(sandbox, f"/v1/payment_intents/{intent['id']}/capture", {}, key="w5")
    assert receiver.received == []

    released = sandbox.release_webhooks(order="reverse")
    sandbox.wait_webhooks_idle()

    assert len(released) == 3
    assert receiver.types() == [
        "payment_intent.succeeded",
        "payment_intent.amount_capturable_updated",
        "payment_intent.created",
    ]


# --- faults -------------------------------------------------------------------------------------
def test_capture_racing_a_void_leaves_the_intent_captured(sandbox):
    intent = post(sandbox, "/v1/payment_intents", CREATE, key="r1").json()
    sandbox.fault("payment_intent.cancel", "capture_wins")

    cancel = post(sandbox, f"/v1/payment_intents/{intent['id']}/cancel", {}, key="r2")

    assert cancel.status_code == 400
    assert cancel.json()["error"]["code"] == "payment_intent_unexpected_state"
    assert cancel.json()["error"]["payment_intent"]["status"] == "succeeded"
    assert get(sandbox, f"/v1/payment_intents/{intent['id']}").json()["status"] == "succeeded"
    assert "payment_intent.succeeded" in [e["type"] for e in sandbox.events()]
    assert "payment_intent.canceled" not in [e["type"] for e in sandbox.events()]


def test_a_dropped_acknowledgement_happens_after_the_effect(sandbox):
    intent = post(sandbox, "/v1/payment_intents", {**CREATE, "capture_method": "automatic"}, key="d1").json()
    sandbox.fault("refund.create", "drop_response")

    with pytest.raises(requests.ConnectionError):
        post(sandbox, "/v1/refunds", {"payment_intent": intent["id"]}, key="d2")
    retried = post(sandbox, "/v1/refunds", {"payment_intent": intent["id"]}, key="d2")

    assert retried.status_code == 200
    assert retried.headers["Idempotent-Replayed"] == "true"
    assert len(sandbox.ledger()["refunds"]) == 1


def test_a_pending_refund_settles_later_with_an_event(sandbox):
    sandbox.configure(refund_initial_status="pending")
    intent = post(sandbox, "/v1/payment_intents", {**CREATE, "capture_method": "automatic"}, key="p1").json()
    refund = post(sandbox, "/v1/refunds", {"payment_intent": intent["id"]}, key="p2").json()
    assert refund["status"] == "pending"

    sandbox.settle_refund(refund["id"], "failed")

    assert get(sandbox, f"/v1/refunds/{refund['id']}").json()["status"] == "failed"
    assert [e["type"] for e in sandbox.events()][-2:] == ["refund.updated", "refund.failed"]


def test_the_management_command_serves_the_sandbox(tmp_path):
    import subprocess
    import sys

    from tests.sandbox_provider import REPO_ROOT

    process = subprocess.Popen(
        [sys.executable, "manage.py", "run_sandbox_provider", "--port", "0", "--db", str(tmp_path / "s.sqlite3")],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        url = process.stdout.readline().strip().split()[-1]
        health = requests.get(f"{url}/_sandbox/health", timeout=10)
        created = requests.post(f"{url}/v1/payment_intents", data=CREATE, timeout=10,
                                headers={"Authorization": "Bearer sk_test_anything", "Idempotency-Key": "c1"})
    finally:
        process.terminate()
        process.wait(timeout=10)

    assert health.json()["ok"] is True
    assert created.json()["status"] == "requires_capture"


def test_the_ledger_survives_a_restart(tmp_path):
    from tests.sandbox_provider import SANDBOX_API_KEY, start_sandbox

    db = tmp_path / "ledger.sqlite3"
    auth = {"Authorization": f"Bearer {SANDBOX_API_KEY}"}
    process, url = start_sandbox(db)
    try:
        created = requests.post(f"{url}/v1/payment_intents", data=CREATE, timeout=10,
                                headers={**auth, "Idempotency-Key": "durable"}).json()
    finally:
        process.terminate()
        process.wait(timeout=10)
    process, url = start_sandbox(db)
    try:
        retrieved = requests.get(f"{url}/v1/payment_intents/{created['id']}", headers=auth, timeout=10)
        replayed = requests.post(f"{url}/v1/payment_intents", data=CREATE, timeout=10,
                                 headers={**auth, "Idempotency-Key": "durable"})
    finally:
        process.terminate()
        process.wait(timeout=10)

    assert retrieved.json() == created
    assert replayed.headers["Idempotent-Replayed"] == "true" and replayed.json()["id"] == created["id"]

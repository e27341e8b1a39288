"""Outbound webhooks: each print-job state change, signed like Stripe, through the outbox, over real HTTP.

The receiver is a real HTTP server on the loopback interface that answers what the test scripts.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from printing.webhooks import verify
from workflow import clock, outbox
from workflow.models import OutboxAttempt, OutboxItem

pytestmark = pytest.mark.django_db


class Receiver:
    def __init__(self, statuses: list[int]) -> None:
        self.statuses = list(statuses)
        self.requests: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append({"headers": dict(self.headers), "body": body})
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks/print"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def receiver():
    made = []

    def make(statuses):
        r = Receiver(statuses)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def subscribe(api_client, url: str, event_types: list[str]) -> dict:
    response = api_client.post("/api/v1/webhook-endpoints", {"url": url, "event_types": event_types}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def complete_a_job(station, submit) -> dict:
    job = submit(station.id)
    lease = station.claim()["lease_token"]
    station.report(job["id"], "received", lease)
    station.report(job["id"], "printing", lease, os_job_id="q-1")
    station.report(job["id"], "completed", lease, os_job_id="q-1")
    return job


def test_a_state_change_is_delivered_signed_retried_after_a_500_and_recorded(api_client, station, submit, receiver):
    # given an endpoint subscribed to completions, whose server fails once with a 500
    hook = receiver([500, 200])
    endpoint = subscribe(api_client, hook.url, ["print_job.completed"])
    assert endpoint["secret"].startswith("whsec_")

    # when a job completes and the outbox delivers
    job = complete_a_job(station, submit)
    item = OutboxItem.objects.get(effect_type="printing.webhook")
    assert outbox.deliver_one() == "attempt_failed"
    with clock.travel(3600):
        assert outbox.deliver_one() == "delivered"

    # then the receiver got the same event twice, each time correctly signed over the raw body
    assert len(hook.requests) == 2
    first, second = hook.requests
    assert first["body"] == second["body"]
    event = json.loads(second["body"])
    assert (event["type"], event["data"]["object"]["id"], event["data"]["object"]["state"]) == (
        "print_job.completed", job["id"], "completed")
    assert event["previous_state"] == "printing"
    assert first["headers"]["Ledgerflow-Event-Id"] == second["headers"]["Ledgerflow-Event-Id"] == event["id"]
    for request in hook.requests:
        header = request["headers"]["Ledgerflow-Signature"]
        timestamp = int(header.split(",")[0].split("=")[1])
        assert verify(endpoint["secret"], header, request["body"], now=timestamp)
        assert not verify(endpoint["secret"], header, request["body"] + b" ", now=timestamp)
        assert not verify("whsec_wrong", header, request["body"], now=timestamp)

    # and both attempts are recorded, the failure with the receiver's answer
    item.refresh_from_db()
    assert (item.state, item.attempts) == ("delivered", 2)
    attempts = list(OutboxAttempt.objects.filter(item=item).order_by("number"))
    assert [a.succeeded for a in attempts] == [False, True]
    assert "HTTP 500" in attempts[0].error


def test_every_state_change_is_announced_to_a_wildcard_subscriber(api_client, station, submit, receiver):
    hook = receiver([])
    subscribe(api_client, hook.url, ["print_job.*"])
    complete_a_job(station, submit)
    while outbox.deliver_one():
        pass
    types = [json.loads(r["body"])["type"] for r in hook.requests]
    assert types == ["print_job.dispatching", "print_job.sent", "print_job.printing", "print_job.completed"]


def test_nothing_is_promised_for_events_nobody_subscribed_to(api_client, station, submit, receiver):
    hook = receiver([])
    subscribe(api_client, hook.url, ["print_job.failed"])
    complete_a_job(station, submit)
    assert not OutboxItem.objects.filter(effect_type="printing.webhook").exists()


def test_a_rejected_report_promises_nothing(api_client, station, submit, receiver):
    hook = receiver([])
    subscribe(api_client, hook.url, ["print_job.*"])
    job = submit(station.id)
    station.claim()
    station.report(job["id"], "received", "not-the-lease")  # stale
    assert OutboxItem.objects.filter(effect_type="printing.webhook").count() == 1  # only the dispatching one


def test_endpoint_input_is_validated(api_client):
    bad_url = api_client.post("/api/v1/webhook-endpoints", {"url": "ftp://x", "event_types": []}, format="json")
    bad_type = api_client.post("/api/v1/webhook-endpoints", {"url": "https://example.test/h",
                                                             "event_types": ["order.paid"]}, format="json")
    assert bad_url.status_code == 400 and bad_type.status_code == 400

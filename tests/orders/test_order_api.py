"""The order endpoints of the integrator contract."""

from __future__ import annotations

import pytest

from orders.models import Order
from orders.payment_port import payment_fact
from tests.orders.conftest import capture, drain
from workflow.models import Transition

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(make_api_client):
    return make_api_client("orders:read", "orders:write", "orders:events")


def test_get_order_shows_state_attempt_allowed_events_and_owed_work(client, place_order):
    order = place_order(2)
    client.post(f"/api/v1/orders/{order.pk}/cancel", {"reason": "too slow"}, format="json")

    body = client.get(f"/api/v1/orders/{order.pk}").json()

    assert (body["state"], body["version"]) == ("cancellation_pending", 3)
    assert body["entered_state_at"]
    assert body["current_attempt"]["ref"] == order.current_attempt_ref
    assert body["current_attempt"]["provider_ref"].startswith("pi_sim_")
    assert set(body["allowed_events"]) == {"payment_captured", "payment_failed", "payment_voided",
                                           "cancellation_timed_out", "route_to_review"}
    assert [(w["effect_type"], w["effect_key"], w["state"]) for w in body["owed_work"]] == [
        ("orders.request_void", f"void:{order.current_attempt_ref}", "pending")]
    assert [t["type"] for t in body["timers"]] == ["cancellation_timed_out"]
    assert client.get("/api/v1/orders/999999").json()["error"]["code"] == "E_NOT_FOUND"


def test_history_includes_rejected_events(client, place_order):
    order = place_order(1)
    client.post(f"/api/v1/orders/{order.pk}/events", {"type": "delivery_confirmed", "identity": "wh-1"},
                format="json")

    rows = client.get(f"/api/v1/orders/{order.pk}/history").json()["transitions"]

    assert [(r["event_type"], r["result"]) for r in rows] == [
        ("created", "applied"), ("payment_started", "applied"), ("delivery_confirmed", "illegal")]
    assert rows[-1]["detail"].startswith("no rule for event 'delivery_confirmed'")


def test_cancel_is_idempotent_by_key_and_refused_when_illegal(client, place_order):
    order = place_order(1)

    first = client.post(f"/api/v1/orders/{order.pk}/cancel", {}, format="json", HTTP_IDEMPOTENCY_KEY="c-1")
    again = client.post(f"/api/v1/orders/{order.pk}/cancel", {}, format="json", HTTP_IDEMPOTENCY_KEY="c-1")
    other_key = client.post(f"/api/v1/orders/{order.pk}/cancel", {}, format="json", HTTP_IDEMPOTENCY_KEY="c-2")

    assert first.status_code == 200 and first.json()["state"] == "cancellation_pending"
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert other_key.status_code == 200 and other_key.json()["result"] == "already_applied"

    delivered = place_order(1)
    capture(delivered)
    for event in ("fulfillment_accepted", "shipped", "delivery_confirmed"):
        client.post(f"/api/v1/orders/{delivered.pk}/events", {"type": event, "identity": event}, format="json")
    r = client.post(f"/api/v1/orders/{delivered.pk}/cancel", {}, format="json", HTTP_IDEMPOTENCY_KEY="c-3")
    assert r.status_code == 409 and r.json()["error"]["code"] == "E_STATE_TRANSITION"
    assert r.json()["error"]["details"]["outcome"]["result"] == "illegal"


def test_new_payment_attempt_after_a_failed_one(client, place_order, port):
    order = place_order(1)
    refused = client.post(f"/api/v1/orders/{order.pk}/payment-attempts", format="json", HTTP_IDEMPOTENCY_KEY="p-0")
    assert refused.status_code == 409  # still payment_pending: no second attempt
    payment_fact(order_id=order.pk, fact="failed", attempt_ref=order.current_attempt_ref)

    r = client.post(f"/api/v1/orders/{order.pk}/payment-attempts", format="json", HTTP_IDEMPOTENCY_KEY="p-1")
    replay = client.post(f"/api/v1/orders/{order.pk}/payment-attempts", format="json", HTTP_IDEMPOTENCY_KEY="p-1")

    assert r.status_code == 201, r.content
    body = r.json()["order"]
    assert body["state"] == "payment_pending" and body["current_attempt"]["number"] == 2
    assert body["current_attempt"]["ref"] != order.current_attempt_ref
    assert replay.json() == r.json() and len(port.attempts) == 2


def test_warehouse_events_with_dry_run_and_outcome_bodies(client, place_order):
    order = place_order(1)
    capture(order)

    preview = client.post(f"/api/v1/orders/{order.pk}/events",
                          {"type": "fulfillment_accepted", "identity": "wh-1", "dry_run": True}, format="json")
    assert preview.json()["result"] == "applied" and preview.json()["transition_id"] is None
    assert Order.objects.get(pk=order.pk).state == "paid"

    applied = client.post(f"/api/v1/orders/{order.pk}/events", {"type": "fulfillment_accepted", "identity": "wh-1"},
                          format="json").json()
    replayed = client.post(f"/api/v1/orders/{order.pk}/events", {"type": "fulfillment_accepted", "identity": "wh-1"},
                           format="json").json()
    conflict = client.post(f"/api/v1/orders/{order.pk}/events",
                           {"type": "fulfillment_accepted", "identity": "wh-1", "payload": {"dock": 4}},
                           format="json").json()
    shipped = client.post(f"/api/v1/orders/{order.pk}/events",
                          {"type": "shipped", "identity": "wh-2", "payload": {"tracking_ref": "TRK9"}},
                          format="json").json()

    assert set(applied) == {"result", "state", "version", "transition_id", "replayed", "detail"}
    assert (applied["result"], applied["state"]) == ("applied", "fulfillment_pending")
    assert (replayed["result"], replayed["replayed"]) == ("already_applied", True)
    assert conflict["result"] == "conflict"
    assert shipped["state"] == "shipped"
    drain()
    assert Order.objects.get(pk=order.pk).tracking_ref == "TRK9"


def test_events_endpoint_accepts_only_warehouse_events_and_needs_its_scope(client, make_api_client, place_order):
    order = place_order(1)
    r = client.post(f"/api/v1/orders/{order.pk}/events", {"type": "payment_captured", "identity": "x"}, format="json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "E_VALIDATION"
    reader = make_api_client("orders:read", name="reader")
    r = reader.post(f"/api/v1/orders/{order.pk}/events", {"type": "shipped", "identity": "x"}, format="json")
    assert r.status_code == 403
    assert not Transition.objects.filter(aggregate_type="orders.order", event_type="shipped").exists()

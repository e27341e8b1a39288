"""Command idempotency over real HTTP (live server): replay, conflict, still running."""

from __future__ import annotations

import threading

import pytest
import requests

from tests.kernel_app import views
from tests.kernel_app.models import Parcel
from workflow.auth import create_api_key


@pytest.fixture
def http(live_server):
    _, raw = create_api_key(name="shop", scopes=["parcels:write"])
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {raw}"
    session.base = live_server.url
    yield session
    session.close()


def post(http, body, key=None, timeout=30):
    headers = {"Idempotency-Key": key} if key else {}
    return http.post(f"{http.base}/api/v1/test-parcels", json=body, headers=headers, timeout=timeout)


@pytest.mark.django_db(transaction=True)
def test_same_key_same_request_returns_the_stored_response(http):
    first = post(http, {"address": "1 Main St"}, key="order-7")
    second = post(http, {"address": "1 Main St"}, key="order-7")

    assert first.status_code == 201 and second.status_code == 201
    assert second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    assert Parcel.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_same_key_different_request_is_a_conflict(http):
    post(http, {"address": "1 Main St"}, key="order-7")
    other = post(http, {"address": "2 Side St"}, key="order-7")

    assert other.status_code == 409
    assert other.json()["error"]["code"] == "E_IDEMPOTENCY_CONFLICT"
    assert Parcel.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_same_key_while_the_first_is_running_is_retry_later(http):
    views.RELEASE.clear()
    views.ENTERED.clear()
    first: dict = {}
    runner = threading.Thread(target=lambda: first.update(r=post(http, {"address": "A", "hold": True}, key="k1")))
    runner.start()
    try:
        assert views.ENTERED.wait(10)
        during = post(http, {"address": "A", "hold": True}, key="k1")
    finally:
        views.RELEASE.set()
        runner.join(30)

    assert during.status_code == 409
    assert during.json()["error"]["code"] == "E_IDEMPOTENCY_IN_PROGRESS"
    assert int(during.headers["Retry-After"]) >= 1
    assert first["r"].status_code == 201
    after = post(http, {"address": "A", "hold": True}, key="k1")
    assert after.status_code == 201 and after.json() == first["r"].json()
    assert Parcel.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_invalid_input_does_not_consume_the_key_and_keys_are_per_caller(http, live_server):
    bad = post(http, {"address": ""}, key="k-bad")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "E_VALIDATION"
    fixed = post(http, {"address": "1 Main St"}, key="k-bad")  # as at Stripe: a refused body never ran
    assert fixed.status_code == 201 and "Idempotent-Replayed" not in fixed.headers
    assert post(http, {"address": "1 Main St"}, key="k-bad").headers.get("Idempotent-Replayed") == "true"

    _, other_raw = create_api_key(name="other-shop", scopes=["parcels:write"])
    other = requests.post(f"{live_server.url}/api/v1/test-parcels", json={"address": "B"},
                          headers={"Authorization": f"Bearer {other_raw}", "Idempotency-Key": "k-bad"}, timeout=30)
    assert other.status_code == 201  # another caller's key space


@pytest.mark.django_db(transaction=True)
def test_overlong_key_is_rejected(http):
    response = post(http, {"address": "A"}, key="x" * 256)
    assert response.status_code == 400 and response.json()["error"]["code"] == "E_VALIDATION"
    assert Parcel.objects.count() == 0

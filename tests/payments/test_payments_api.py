"""Reads of attempts and refunds over the REST API (scoped keys)."""

import pytest

from payments.models import PaymentAttempt
from workflow import kernel

pytestmark = pytest.mark.django_db


def test_an_attempt_is_readable_with_the_payments_read_scope(make_api_client):
    attempt = kernel.create(PaymentAttempt, actor="test", state="authorized", owner_type="orders.order",
                            owner_id="7", amount=1200, currency="eur", provider_intent_id="pi_read")

    ok = make_api_client("payments:read").get(f"/api/v1/payment-attempts/{attempt.pk}")
    forbidden = make_api_client("orders:read").get(f"/api/v1/payment-attempts/{attempt.pk}")
    missing = make_api_client("payments:read").get("/api/v1/payment-attempts/999999")

    assert ok.status_code == 200
    assert (ok.json()["state"], ok.json()["provider_intent_id"], ok.json()["version"]) == ("authorized", "pi_read", 1)
    assert set(ok.json()["allowed_events"]) >= {"capture", "void", "captured"}
    assert forbidden.status_code == 403
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "E_NOT_FOUND"

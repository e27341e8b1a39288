"""A database that restarts under a request: the API answers 503 E_UNAVAILABLE with Retry-After (found
by ``make chaos``: PostgreSQL restarts surfaced as 500 E_INTERNAL), and persistent connections broken
by the restart are health-checked before reuse."""

from __future__ import annotations

from unittest import mock

import pytest
from django.conf import settings
from django.db import OperationalError

pytestmark = pytest.mark.django_db


def test_a_database_outage_is_503_unavailable_with_retry_after(api_client):
    # The connection dying mid-request is the outside failure simulated here (PostgreSQL itself is shared).
    with mock.patch("orders.api.cart_create",
                    side_effect=OperationalError("terminating connection due to administrator command")):
        response = api_client.post("/api/v1/carts")

    assert response.status_code == 503
    assert response.json()["error"]["code"] == "E_UNAVAILABLE"
    assert response["Retry-After"] == "1"


def test_other_unexpected_errors_stay_500_internal(api_client):
    with mock.patch("orders.api.cart_create", side_effect=RuntimeError("a bug")):
        response = api_client.post("/api/v1/carts")

    assert response.status_code == 500
    assert response.json()["error"]["code"] == "E_INTERNAL"


def test_persistent_connections_are_health_checked():
    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True

"""Shared fixtures: API clients with keys, and helpers every app's tests use."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from workflow.auth import create_api_key


@pytest.fixture
def make_api_client(db):
    """Build an API client whose key holds the given scopes."""

    def build(*scopes: str, name: str = "test-integrator") -> APIClient:
        _, raw = create_api_key(name=name, scopes=list(scopes) or ["*"])
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        client.raw_key = raw
        return client

    return build


@pytest.fixture
def api_client(make_api_client):
    return make_api_client("*")

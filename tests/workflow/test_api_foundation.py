"""Health, readiness, OpenAPI, authentication and the error contract."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from workflow.models import ApiKey

pytestmark = pytest.mark.django_db


def test_healthz_and_readyz(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.json()
    assert ready.json()["checks"] == {"database": "ok", "broker": "ok"}


def test_openapi_schema_and_docs_are_served(client):
    schema = client.get("/api/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    assert schema.json()["openapi"].startswith("3.")
    docs = client.get("/api/v1/docs")
    assert docs.status_code == 200
    assert b"swagger-ui" in docs.content
    assert b"cdn.jsdelivr" not in docs.content  # served locally: the docs work without internet


def test_missing_key_is_401_in_the_contract_shape():
    response = APIClient().post("/api/v1/test-parcels", {"address": "A"}, format="json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "E_UNAUTHENTICATED"
    assert set(response.json()["error"]) == {"code", "message", "details"}


@pytest.mark.parametrize("header", ["Bearer lf_nope_nope", "Bearer garbage", "Basic abc"])
def test_wrong_key_is_401(header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.post("/api/v1/test-parcels", {"address": "A"}, format="json")
    assert response.status_code == 401 and response.json()["error"]["code"] == "E_UNAUTHENTICATED"


def test_key_without_the_scope_is_403(make_api_client):
    response = make_api_client("orders:read").post("/api/v1/test-parcels", {"address": "A"}, format="json")
    assert response.status_code == 403 and response.json()["error"]["code"] == "E_FORBIDDEN"


def test_deactivated_key_is_refused(make_api_client):
    client = make_api_client("parcels:write")
    ApiKey.objects.update(active=False)
    assert client.post("/api/v1/test-parcels", {"address": "A"}, format="json").status_code == 401


def test_validation_errors_name_the_fields(make_api_client):
    response = make_api_client("parcels:write").post("/api/v1/test-parcels", {}, format="json")
    body = response.json()["error"]
    assert response.status_code == 400 and body["code"] == "E_VALIDATION"
    assert "address" in body["message"] and "address" in body["details"]["fields"]


def test_malformed_json_is_400(make_api_client):
    response = make_api_client("parcels:write").post("/api/v1/test-parcels", data="{not json",
                                                     content_type="application/json")
    assert response.status_code == 400 and response.json()["error"]["code"] == "E_VALIDATION"


def test_unknown_api_path_and_method_keep_the_error_shape(api_client):
    missing = api_client.get("/api/v1/nothing-here")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "E_NOT_FOUND"
    wrong_method = api_client.get("/api/v1/test-parcels")
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == "E_METHOD_NOT_ALLOWED"


def test_event_endpoint_answers_the_outcome_body(make_api_client):
    client = make_api_client("parcels:write")
    parcel = client.post("/api/v1/test-parcels", {"address": "A"}, format="json").json()
    url = f"/api/v1/test-parcels/{parcel['id']}/events"
    applied = client.post(url, {"type": "pack", "identity": "e1", "payload": {"weight_grams": 3}}, format="json")
    replay = client.post(url, {"type": "pack", "identity": "e1", "payload": {"weight_grams": 3}}, format="json")
    assert applied.json()["result"] == "applied" and applied.json()["version"] == 2
    assert replay.json() | {"transition_id": None} == {"result": "already_applied", "state": "packed", "version": 2,
                                                       "transition_id": None, "replayed": True, "detail": ""}
    missing = client.post("/api/v1/test-parcels/999999/events", {"type": "pack", "identity": "e"}, format="json")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "E_NOT_FOUND"


def test_create_api_key_prints_only_the_key_and_stores_a_hash():
    out = io.StringIO()
    call_command("create_api_key", "--name", "storefront", "--scopes", "orders:write,orders:read", stdout=out)
    raw = out.getvalue().strip()
    assert raw.startswith("lf_") and "\n" not in raw
    key = ApiKey.objects.get(name="storefront")
    assert key.scopes == ["orders:read", "orders:write"]
    assert raw.split("_", 2)[2] not in key.secret_hash
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.post("/api/v1/test-parcels", {"address": "A"}, format="json").status_code == 403  # scope

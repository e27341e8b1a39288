"""The access matrix: every route of the URL conf × eight callers, with the expected answer for each cell.

Routes come from ``django.urls.get_resolver()`` (tests/security/routes.py); each route's rule is read from
what its view declares, so a new endpoint without a rule fails here. Path parameters are dummies naming
objects that do not exist: an authorized caller must get 404 (the lookup ran), everybody else 401/403 or
the login redirect (authorization ran first). Every GET is also checked to change no state.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.http import HttpResponse
from django.test import Client, override_settings
from django.urls import include, path

from printing import services as printing_services
from printing.models import Station
from workflow.access import PUBLIC, SIGNED_WEBHOOK
from workflow.models import ApiKey, Transition

from . import routes as R
from .conftest import PRINCIPALS, database_dump, error_shape_problem, print_job_for

pytestmark = pytest.mark.django_db

# Bodies that pass validation, so that an authorized POST to a missing object reaches the lookup (404).
VALID_BODIES = {
    "api/v1/carts/<id:cart_id>/items": {"sku": "sku-1", "quantity": 1},
    "api/v1/orders/<id:order_id>/events": {"type": "shipped", "identity": "matrix-1"},
    "api/v1/test-parcels/<id:parcel_id>/events": {"type": "ship", "identity": "matrix-1"},
    "api/v1/station/jobs/<id:job_id>/report": {"event_id": "matrix-1", "lease_token": "t", "kind": "received"},
}

AUTHORIZED = "authorized"
LOGIN = "login redirect"
ADMIN_LOGIN = "admin login redirect"

# rule → caller → expected answer (a status, or one of the words above)
EXPECTED: dict[str, dict[str, object]] = {
    R.API_KEY: {"anonymous": 401, "wrong_key": 401, "key_without_scope": 403, "key_with_scope": AUTHORIZED,
                "station_a": 401, "station_b": 401, "support": 401, "operator": 401},
    R.STATION: {"anonymous": 401, "wrong_key": 401, "key_without_scope": 401, "key_with_scope": 401,
                "station_a": AUTHORIZED, "station_b": AUTHORIZED, "support": 401, "operator": 401},
    PUBLIC: dict.fromkeys(PRINCIPALS, AUTHORIZED),
    # Nobody in the matrix holds the provider's signing secret: a missing signature is 401 E_SIGNATURE.
    SIGNED_WEBHOOK: dict.fromkeys(PRINCIPALS, 401),
    R.CONSOLE_READ: {**dict.fromkeys(PRINCIPALS, LOGIN), "support": AUTHORIZED, "operator": AUTHORIZED},
    R.CONSOLE_OPERATOR: {**dict.fromkeys(PRINCIPALS, LOGIN), "support": 403, "operator": AUTHORIZED},
    # The console roles are not staff: the Django admin is for superusers/staff only.
    R.ADMIN_STAFF: dict.fromkeys(PRINCIPALS, ADMIN_LOGIN),
}


def _state_rows() -> tuple[int, int, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT (SELECT count(*) FROM workflow_transition), (SELECT count(*) FROM "
                       "workflow_outboxitem), (SELECT count(*) FROM workflow_timer)")
        return cursor.fetchone()


def _call(client: Client, route: R.Route, method: str):
    if method == "GET":
        return client.get(route.path)
    body = VALID_BODIES.get(route.pattern, {})
    return client.generic(method, route.path, json.dumps(body), content_type="application/json")


def _judge(route: R.Route, rule: str, expected, response) -> str | None:
    status = response.status_code
    location = response.get("Location", "")
    if expected == LOGIN:
        return None if status == 302 and location.startswith("/console/login/") else "expected login redirect"
    if expected == ADMIN_LOGIN:
        return None if status == 302 and location.startswith("/admin/login/") else "expected admin login redirect"
    if expected == AUTHORIZED:
        public_redirect = rule == PUBLIC  # a login page sends a signed-in user on; a logout to the login page
        if status in (401, 403) or ("/login/" in location and not public_redirect):
            return "expected to be let in"
        if status >= 500:
            return "server error"
        if route.names_object and status != 404:
            return "expected 404 for the missing object"
        return None
    if status != expected:
        return f"expected {expected}"
    if route.is_api and status >= 400 and (problem := error_shape_problem(response)):
        return f"error body: {problem}"
    return None


def test_every_route_declares_an_access_rule():
    # given the URL conf, when each route's rule is derived from its view, then none is undeclared
    undeclared = []
    for route in R.all_routes():
        try:
            R.route_rule(route)
        except R.UndeclaredAccess as exc:
            undeclared.append(str(exc))
    assert undeclared == []


def _undeclared_view(request):
    return HttpResponse("hello")


urlpatterns = [path("api/v1/brand-new", _undeclared_view), path("", include("tests.kernel_app.urls"))]


@override_settings(ROOT_URLCONF=__name__)
def test_a_new_endpoint_without_a_rule_fails_the_matrix():
    # given a URL conf with a plain view that declares nothing, then the derivation refuses it
    routes = R.all_routes()
    brand_new = next(r for r in routes if r.pattern == "api/v1/brand-new")
    with pytest.raises(R.UndeclaredAccess, match="brand-new"):
        R.route_rule(brand_new)


def test_access_matrix(callers, catalog, capsys):
    # given every route, method and caller; when each calls the route; then each cell answers as declared
    failures: list[str] = []
    cells = 0
    gets_writing: list[str] = []
    for route in R.all_routes():
        rule = R.route_rule(route)
        for method in R.methods_of(route):
            scope = R.api_scope(route, method) if rule == R.API_KEY else None
            for who in PRINCIPALS:
                expected = EXPECTED[rule][who]
                client = callers.client(who, scope=scope)
                before = _state_rows() if method == "GET" else None
                response = _call(client, route, method)
                cells += 1
                if before is not None and _state_rows() != before:
                    gets_writing.append(f"GET {route.path} as {who}")
                problem = _judge(route, rule, expected, response)
                if problem:
                    failures.append(f"{method} {route.path} as {who} [{rule}]: {problem}; got "
                                    f"{response.status_code} {response.get('Location', '')} "
                                    f"{response.content[:160]!r}")
    with capsys.disabled():
        print(f"\naccess matrix: {cells} cells, {len(failures)} failing")
    assert not failures, "\n".join(failures)
    assert not gets_writing, "\n".join(gets_writing)


def test_a_station_sees_only_its_own_jobs(callers):
    # given a job of station A
    job = print_job_for(callers.station_a)
    station_a, station_b = callers.client("station_a"), callers.client("station_b")
    report = {"event_id": "b-1", "lease_token": "whatever", "kind": "received"}
    # when station B asks about it or reports on it, then it does not exist for B (and nothing is recorded)
    assert station_b.get(f"/api/v1/station/jobs/{job.pk}").status_code == 404
    answer = station_b.post(f"/api/v1/station/jobs/{job.pk}/report", report, content_type="application/json")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "E_NOT_FOUND"
    assert not Transition.objects.filter(aggregate_id=str(job.pk), event_identity__startswith="station:").exists()
    # and station B's claim never hands out A's job
    assert station_b.post("/api/v1/station/claim", {"wait_seconds": 0},
                          content_type="application/json").json() == {"job": None}
    # while station A sees it
    assert station_a.get(f"/api/v1/station/jobs/{job.pk}").json()["state"] == "pending"


def test_api_keys_and_station_tokens_are_stored_hashed(callers):
    # given keys and tokens issued, when the whole database is dumped, then no raw secret appears in it
    dump = database_dump()
    for secret in callers.raw_secrets:
        assert secret not in dump
    keys = database_dump([ApiKey._meta.db_table, Station._meta.db_table])
    assert ApiKey.objects.get(name="unscoped").secret_hash in keys  # the dump is of the right rows


def test_webhook_secrets_are_never_echoed_after_creation(callers, operator_reads):
    # given a webhook endpoint (its secret in the creation answer only) and a job whose change it is owed
    integrator = callers.client("key_with_scope", scope="*")
    created = integrator.post("/api/v1/webhook-endpoints", {"url": "https://example.test/hook"},
                              content_type="application/json")
    assert created.status_code == 201
    secret = created.json()["secret"]
    job = print_job_for(callers.station_a)
    printing_services.print_job_cancel(job_id=job.pk, actor="test")  # a state change: a webhook is owed
    # when every GET route is read by every caller (with the real job's id where a route takes one)
    seen = []
    for route in R.all_routes():
        if "GET" not in R.methods_of(route) or route.pattern.startswith("admin/"):
            continue
        url = route.path.replace(R.MISSING_ID, str(job.pk))
        for who in PRINCIPALS:
            response = callers.client(who, scope="*").get(url)
            seen.append(url)
            # then the secret is in none of them
            assert secret.encode() not in response.content, f"{url} as {who} echoes the webhook secret"
    for url in operator_reads(job):
        response = callers.client("operator").get(url)
        assert response.status_code == 200, url
        assert secret.encode() not in response.content, f"{url} echoes the webhook secret"
    assert len(seen) > 20


@pytest.fixture
def operator_reads():
    def urls(job) -> list[str]:
        from workflow.models import OutboxItem

        item = OutboxItem.objects.filter(effect_type="printing.webhook").first()
        assert item is not None, "the cancellation promised a webhook"
        return [f"/console/printing.printjob/{job.pk}/", f"/console/workflow.outboxitem/{item.pk}/",
                "/console/waiting/", "/console/"]

    return urls


def test_object_ids_in_our_paths_fit_a_bigint():
    # given our API and console routes, then an id parameter is <id:…> (≤ 18 digits), never a bare <int:…>
    # whose huge values reached PostgreSQL as "bigint out of range" (a 500)
    bare = [r.pattern for r in R.all_routes() if r.pattern.startswith(("api/", "console/")) and "<int:" in r.pattern]
    assert bare == []

"""Bad input on every write endpoint of the integrator and station API: a clear 4xx in the contract's
error body, and nothing written (every table's row count is the same before and after).

The endpoints come from the URL conf (every POST under /api/v1/); each needs a VALID body below, which
the cases then break one way at a time. A new write endpoint without a valid body fails the test.
"""

from __future__ import annotations

import base64
import json
import re

import pytest
from django.test import Client, override_settings

from orders.payment_port import SimulatedPaymentPort
from orders.services import cart_add_item, cart_create, checkout_place
from payments.sandbox.webhooks import sign
from workflow import clock
from workflow.auth import create_api_key

from . import routes as R
from .conftest import error_shape_problem, insert_delete_marks, print_job_for, table_counts

pytestmark = pytest.mark.django_db

SMALL_LIMIT = 64 * 1024  # DATA_UPLOAD_MAX_MEMORY_SIZE during the huge-body case (the real one is 12 MiB)
NUL = "nul\x00byte"
UNICODE = "Grüße ✓ 🖨️ \u202eRTL ﷽"
OVERLONG = "x" * 20_000

# Endpoints that answer a dry run: a field problem is a 200 {"accepted": false, "errors": [...]}.
DRY_RUN = {"api/v1/print-jobs/validate"}
# Endpoints answering per entry: a broken entry is {"job_id", "event_id", "error": {code, message}} in a 200.
PER_ENTRY = {"api/v1/station/ledger"}
# Endpoints authenticated by a signature over the raw body (tested at the end of this file).
SIGNED = {"api/v1/webhooks/payments/<str:provider>"}
TEST_ONLY = re.compile(r"^api/v1/test-")


@pytest.fixture(autouse=True)
def simulated_port(settings):
    settings.ORDERS_PAYMENT_PORT = "orders.payment_port.SimulatedPaymentPort"
    SimulatedPaymentPort.instance().reset()
    yield
    SimulatedPaymentPort.instance().reset()


@pytest.fixture
def world(callers, catalog):
    cart = cart_create(actor="test")
    cart_add_item(cart_id=cart.pk, sku="sku-1", quantity=1, actor="test")
    order_cart = cart_create(actor="test")
    cart_add_item(cart_id=order_cart.pk, sku="sku-1", quantity=1, actor="test")
    order = checkout_place(cart_id=order_cart.pk, checkout_key="bad-input", actor="test")
    job = print_job_for(callers.station_a)
    _, key = create_api_key(name="bad input", scopes=["*"])
    doc = base64.b64encode(b"hello printer").decode()
    valid = {
        "api/v1/products": {"sku": "new-sku", "name": "Cup", "unit_price": 100, "currency": "EUR",
                            "stock_on_hand": 5},
        "api/v1/carts": None,  # takes no body
        "api/v1/carts/<id:cart_id>/items": {"sku": "sku-1", "quantity": 2},
        "api/v1/checkout": {"cart_id": cart.pk},
        "api/v1/orders/<id:order_id>/cancel": {"reason": "changed my mind"},
        "api/v1/orders/<id:order_id>/payment-attempts": None,
        "api/v1/orders/<id:order_id>/events": {"type": "shipped", "identity": "wh-1", "payload": {"by": "dhl"},
                                                "dry_run": True},
        "api/v1/print-jobs": {"station_id": callers.station_a.pk, "content_base64": doc, "content_type": "text",
                              "title": "slip", "copies": 1, "expires_in_seconds": 600,
                              "business_object": {"type": "order", "id": "42"}},
        "api/v1/print-jobs/validate": {"station_id": callers.station_a.pk, "content_base64": doc,
                                       "content_type": "text", "copies": 2},
        "api/v1/print-jobs/<id:job_id>/cancel": None,
        "api/v1/station/heartbeat": {"station_version": "1.0", "output": "dir:/tmp", "open_jobs": 0,
                                     "ledger_jobs": 0},
        "api/v1/station/claim": {"wait_seconds": 0.0},
        "api/v1/station/jobs/<id:job_id>/report": {"event_id": "ev-1", "lease_token": "lease", "kind": "received"},
        "api/v1/station/ledger": {"entries": [{"job_id": job.pk, "event_id": "ev-2", "lease_token": "lease",
                                               "kind": "received"}]},
        "api/v1/webhook-endpoints": {"url": "https://example.test/hook", "event_types": ["print_job.*"],
                                     "description": "ours"},
    }
    ids = {"cart_id": cart.pk, "order_id": order.pk, "job_id": job.pk}
    return {"valid": valid, "ids": ids, "key": key, "callers": callers}


def write_endpoints() -> list[R.Route]:
    return [r for r in R.all_routes() if r.is_api and "POST" in R.methods_of(r)
            and r.pattern not in SIGNED and not TEST_ONLY.match(r.pattern)]


def _client(world, route: R.Route) -> Client:
    rule = R.route_rule(route)
    token = world["callers"].station_a_token if rule == R.STATION else world["key"]
    client = Client()
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return client


def _path(world, route: R.Route) -> str:
    return "/" + re.sub(r"<id:(\w+)>", lambda m: str(world["ids"][m.group(1)]), route.pattern)


def _wrong_types(value):
    if isinstance(value, bool):
        return ["yes", 3, {}]
    if isinstance(value, int):
        return ["abc", 1.5, [], {}, -1, 10**30, None]
    if isinstance(value, str):
        return [True, [], {}, None, OVERLONG, NUL]
    if isinstance(value, list):
        return ["abc", {}, [[]] if not value else [None], None, [1] * 1000]
    if isinstance(value, float):
        return ["abc", [], {}, True, -1.0, 1e308, None]
    if isinstance(value, dict):
        return ["abc", [], None, {"x": NUL}]
    return [None]


def bad_bodies(valid: dict | None) -> list[tuple[str, bytes, str]]:
    """(case, raw body, content type) — each one thing wrong."""
    as_json = "application/json"
    cases = [("malformed JSON", b'{"a": ', as_json), ("JSON array", b"[1, 2]", as_json),
             ("JSON string", b'"hello"', as_json), ("JSON null", b"null", as_json),
             ("wrong content type", json.dumps(valid or {}).encode(), "text/plain"),
             ("form encoded", b"a=1&b=2", "application/x-www-form-urlencoded"),
             ("unknown field", json.dumps({**(valid or {}), "surprise": 1}).encode(), as_json)]
    for field, value in (valid or {}).items():
        for wrong in _wrong_types(value):
            cases.append((f"{field}={json.dumps(wrong)[:40]}", json.dumps({**valid, field: wrong}).encode(), as_json))
        cases.append((f"without {field}", json.dumps({k: v for k, v in valid.items() if k != field}).encode(),
                      as_json))
        if field == "content_base64":
            cases.append(("bad base64", json.dumps({**valid, field: "!!not base64!!"}).encode(), as_json))
        if field == "entries":  # each entry broken
            entry = valid["entries"][0]
            for k, v in entry.items():
                for wrong in _wrong_types(v)[:3]:
                    cases.append((f"entries[0].{k}={json.dumps(wrong)[:30]}",
                                  json.dumps({"entries": [{**entry, k: wrong}]}).encode(), as_json))
    return cases


# Cases that may legitimately succeed: an optional field left out.
def _may_succeed(case: str, valid: dict | None) -> bool:
    if not case.startswith("without "):
        return False
    field = case.removeprefix("without ")
    return field in {"title", "copies", "expires_in_seconds", "business_object", "description", "event_types",
                     "payload", "dry_run", "reason", "station_version", "output", "open_jobs", "ledger_jobs",
                     "wait_seconds"}


def test_every_write_endpoint_has_a_valid_body(world):
    missing = [r.pattern for r in write_endpoints() if r.pattern not in world["valid"]]
    assert missing == [], "add a valid body for the new write endpoint(s) here"


def test_valid_bodies_are_accepted(world):
    # the oracle of the cases below: the unbroken body is answered 2xx
    for route in write_endpoints():
        body = world["valid"][route.pattern]
        response = _client(world, route).post(_path(world, route), json.dumps(body) if body is not None else "",
                                              content_type="application/json")
        accepted = response.status_code < 300 or (  # the body passed; the order's state refused the command
            response.status_code == 409 and response.json()["error"]["code"] == "E_STATE_TRANSITION")
        assert accepted, (route.pattern, response.status_code, response.content[:300])


def test_bad_input_is_refused_and_writes_nothing(world, capsys):
    failures, cases = [], 0
    # Row counts of every table; recounted only when PostgreSQL saw an insert or delete in between.
    counts, marks = table_counts(), insert_delete_marks()
    for route in write_endpoints():
        valid = world["valid"][route.pattern]
        client, url = _client(world, route), _path(world, route)
        for case, raw, content_type in bad_bodies(valid):
            response = client.generic("POST", url, raw, content_type=content_type)
            cases += 1
            status = response.status_code
            written = {}
            if (now_marks := insert_delete_marks()) != marks:  # something inserted or deleted: count every table
                after = table_counts()
                written = {t: (n, after[t]) for t, n in counts.items() if after[t] != n}
                counts, marks = after, now_marks
            where = f"{route.pattern} [{case}]: {status} {response.content[:200]!r}"
            if status < 300 and _may_succeed(case, valid):
                continue
            if route.pattern in PER_ENTRY and case.startswith(("entries[0].", "entries=[null]")) and status == 200:
                # the ledger answers each entry on its own: a broken entry is an error in its result
                results = response.json()["results"]
                if not all("error" in r for r in results):
                    failures.append(f"{where}: a broken ledger entry was applied")
                elif written:
                    failures.append(f"{where}: wrote {written}")
                continue
            if route.pattern in DRY_RUN and status == 200:
                if response.json().get("accepted") is not False:
                    failures.append(f"{where}: a dry run accepted bad input")
                elif written:
                    failures.append(f"{where}: the dry run wrote {written}")
                continue
            if not 400 <= status < 500:
                failures.append(f"{where}: expected a 4xx")
                continue
            if problem := error_shape_problem(response):
                failures.append(f"{where}: {problem}")
            if written:
                failures.append(f"{where}: wrote {written}")
    with capsys.disabled():
        print(f"\nbad input: {cases} cases on {len(write_endpoints())} write endpoints, {len(failures)} failing")
    assert not failures, "\n".join(failures)


def test_unicode_text_is_kept_or_refused_cleanly(world):
    # free text may hold any Unicode (kept as sent); a NUL byte cannot be stored, so it is refused
    for route in write_endpoints():
        valid = world["valid"][route.pattern]
        for field, value in (valid or {}).items():
            if not isinstance(value, str) or field in ("content_base64",):
                continue
            response = _client(world, route).post(_path(world, route), json.dumps({**valid, field: UNICODE}),
                                                  content_type="application/json")
            assert response.status_code < 500, (route.pattern, field, response.content[:300])
            if response.status_code >= 400:
                assert error_shape_problem(response) is None


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=SMALL_LIMIT)
def test_huge_bodies_are_413_in_the_contract_shape_and_write_nothing(world):
    huge = json.dumps({"padding": "x" * (SMALL_LIMIT * 2)}).encode()
    endpoints = write_endpoints() + [r for r in R.all_routes() if r.pattern in SIGNED]
    for route in endpoints:
        before = table_counts()
        url = _path(world, route).replace("<str:provider>", "sandbox")
        response = _client(world, route).generic("POST", url, huge, content_type="application/json")
        assert response.status_code == 413, (route.pattern, response.status_code, response.content[:200])
        assert response.json()["error"]["code"] == "E_PAYLOAD_TOO_LARGE"
        assert table_counts() == before, route.pattern


SIGNED_BAD_BODIES = [
    ("malformed JSON", b'{"id": '),
    ("JSON array", b"[1]"),
    ("not UTF-8", b'{"id": "\xff\xfe"}'),
    ("no data.object", json.dumps({"id": "evt_1", "type": "payment_intent.succeeded"}).encode()),
    ("wrong types", json.dumps({"id": 5, "type": [], "data": {"object": {"id": {}}}}).encode()),
    ("overlong id", json.dumps({"id": "e" * 300, "type": "x", "data": {"object": {"id": "pi_1"}}}).encode()),
    ("NUL in the event", json.dumps({"id": "evt_nul", "type": "payment_intent.succeeded",
                                     "data": {"object": {"id": "pi_1", "metadata": {"k": NUL}}}}).encode()),
    ("NUL in the id", json.dumps({"id": "evt_\x00", "type": "x", "data": {"object": {"id": "pi_1"}}}).encode()),
]


@pytest.mark.parametrize("case,raw", SIGNED_BAD_BODIES, ids=[c for c, _ in SIGNED_BAD_BODIES])
def test_the_signed_webhook_refuses_malformed_bodies_even_when_signed(db, settings, case, raw):
    # given a body signed with the real secret, but malformed
    secret = list(settings.STRIPE_WEBHOOK_SECRETS)[0]
    header = sign(raw, secret, int(clock.now().timestamp()))
    before = table_counts()
    # when the provider delivers it
    response = Client().generic("POST", "/api/v1/webhooks/payments/sandbox", raw, content_type="application/json",
                                HTTP_STRIPE_SIGNATURE=header)
    # then 400 E_VALIDATION, nothing stored
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["code"] == "E_VALIDATION"
    assert table_counts() == before


def test_the_write_oracle_sees_a_write(db):
    # the fast path of the oracle: PostgreSQL's per-transaction insert counter moves on any insert
    marks, counts = insert_delete_marks(), table_counts()
    cart_create(actor="oracle check")
    assert insert_delete_marks() != marks
    assert table_counts()["orders_cart"] == counts["orders_cart"] + 1

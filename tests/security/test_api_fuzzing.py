"""API fuzzing with schemathesis against the served OpenAPI document, over real HTTP (a live server).

Every operation of /api/v1/schema gets schema-conforming (positive) and schema-violating (negative)
requests, authenticated as an integrator with a ``*`` key (station operations: a station token). The
budget is bounded for CI (``FUZZ_EXAMPLES`` per operation and mode; ``LEDGERFLOW_FUZZ_EXAMPLES`` raises
it). Promise checked: no 5xx, ever; every error answer is the contract's ``{"error": {code, message,
details}}``; successful answers match their documented schema.
"""

from __future__ import annotations

import json
import os

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from printing.services import station_create
from workflow.auth import create_api_key

CONFORMANCE = [status_code_conformance, content_type_conformance, response_schema_conformance]
FUZZ_EXAMPLES = int(os.environ.get("LEDGERFLOW_FUZZ_EXAMPLES", "12"))  # per operation and mode (≤ 25 per op)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def quick_long_polls(settings):
    # Long polls are bounded by settings; keep them short so a fuzzed wait never holds the run.
    settings.PRINT_CLAIM_MAX_WAIT_SECONDS = 0.2
    settings.PRINT_WAIT_MAX_TIMEOUT_SECONDS = 0.2
    settings.PRINT_LONG_POLL_INTERVAL_SECONDS = 0.05
    settings.ORDERS_PAYMENT_PORT = "orders.payment_port.SimulatedPaymentPort"


def _contract_problem(response) -> str | None:
    try:
        body = json.loads(response.content)
    except ValueError:
        return "error body is not JSON"
    error = body.get("error") if isinstance(body, dict) else None
    if not (isinstance(error, dict) and isinstance(error.get("code"), str) and error["code"].startswith("E_")
            and isinstance(error.get("message"), str) and isinstance(error.get("details"), dict)):
        return "error body is not {error: {code, message, details}}"
    return None


def _fuzzer(operation, mode, token: str, base_url: str, session, counts: dict, failures: list):
    @given(case=operation.as_strategy(generation_mode=mode))
    @hypothesis_settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
                         phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    def fuzz(case):
        # when the case is sent
        response = case.call(base_url=base_url, session=session, headers={"Authorization": f"Bearer {token}"})
        counts["requests"] += 1
        where = (f"{case.method} {case.formatted_path} [{mode.value}] query={case.query!r} "
                 f"body={str(getattr(case, 'body', None))[:200]} → {response.status_code} "
                 f"{response.content[:300]!r}")
        # then no server error, errors in the contract's shape, successes as documented
        if response.status_code >= 500:
            counts["5xx"] += 1
            failures.append(f"5xx: {where}")
            return
        if response.status_code >= 400:
            counts["4xx"] += 1
            if problem := _contract_problem(response):
                counts["shape"] += 1
                failures.append(f"{problem}: {where}")
        else:
            counts["2xx"] += 1
        try:  # the status is documented for the operation, and the body matches that status's schema
            case.validate_response(response, checks=CONFORMANCE)
        except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - collect every mismatch, report them all
            counts["schema"] += 1
            failures.append(f"not as documented: {where}: {str(exc)[:400]}")

    return fuzz


def test_fuzz_every_operation(live_server, quick_long_polls, capsys):
    # given the served schema, an integrator key with every scope and a station token
    _, api_key = create_api_key(name="fuzzer", scopes=["*"])
    _, station_token = station_create(name="Fuzz station")
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/v1/schema")
    session = requests.Session()
    failures: list[str] = []
    counts = {"operations": 0, "requests": 0, "2xx": 0, "4xx": 0, "5xx": 0, "shape": 0, "schema": 0}

    for result in schema.get_all_operations():
        operation = result.ok()
        token = station_token if operation.path.startswith("/api/v1/station/") else api_key
        counts["operations"] += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzzer(operation, mode, token, live_server.url, session, counts, failures)()

    with capsys.disabled():
        print(f"\nfuzzing: {counts}")
    assert counts["operations"] >= 20
    assert not failures, "\n".join(failures[:40])

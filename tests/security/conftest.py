"""The eight callers of the access matrix, and helpers shared by the security tests."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest
from django.db import connection
from django.test import Client

from ops_console.services import console_user_create
from orders.services import product_create
from printing import services as printing_services
from workflow.auth import create_api_key

PASSWORD = "correct horse battery staple"
UNRELATED_SCOPE = "nothing:at-all"


@dataclasses.dataclass
class Callers:
    wrong_key: str
    unscoped_key: str
    station_a: object
    station_a_token: str
    station_b: object
    station_b_token: str
    support: object
    operator: object
    raw_secrets: list[str]

    def client(self, who: str, *, scope: str | None = None) -> Client:
        client = Client()
        if who == "anonymous":
            return client
        if who == "wrong_key":
            return _bearer(client, self.wrong_key)
        if who == "key_without_scope":
            return _bearer(client, self.unscoped_key)
        if who == "key_with_scope":
            _, raw = create_api_key(name=f"matrix {scope}", scopes=[scope or "*"])
            return _bearer(client, raw)
        if who == "station_a":
            return _bearer(client, self.station_a_token)
        if who == "station_b":
            return _bearer(client, self.station_b_token)
        if who in ("support", "operator"):
            client.force_login(getattr(self, who))
            return client
        raise ValueError(who)


PRINCIPALS = ("anonymous", "wrong_key", "key_without_scope", "key_with_scope", "station_a", "station_b",
              "support", "operator")


def _bearer(client: Client, token: str) -> Client:
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return client


@pytest.fixture
def callers(db) -> Callers:
    unscoped, unscoped_raw = create_api_key(name="unscoped", scopes=[UNRELATED_SCOPE])
    real_prefix = unscoped.prefix
    station_a, token_a = printing_services.station_create(name="Station A")
    station_b, token_b = printing_services.station_create(name="Station B")
    return Callers(
        wrong_key=f"lf_{real_prefix}_this-is-not-the-secret",  # a real prefix with a wrong secret
        unscoped_key=unscoped_raw,
        station_a=station_a, station_a_token=token_a,
        station_b=station_b, station_b_token=token_b,
        support=console_user_create(username="sam-support", password=PASSWORD, role="support"),
        operator=console_user_create(username="olga-operator", password=PASSWORD, role="operator"),
        raw_secrets=[unscoped_raw.split("_", 2)[2], token_a.split("_", 2)[2], token_b.split("_", 2)[2]],
    )


@pytest.fixture
def catalog(db):
    return product_create(sku="sku-1", name="Mug", unit_price=1200, currency="EUR", stock_on_hand=50)


def print_job_for(station, *, actor: str = "test") -> object:
    return printing_services.print_job_submit(data={
        "station_id": station.pk, "content_base64": base64.b64encode(b"hello printer").decode(),
        "content_type": "text", "title": "packing slip"}, actor=actor)


def table_counts() -> dict[str, int]:
    """Rows in every table of the database (the 'nothing written' oracle)."""
    tables = sorted(connection.introspection.table_names())
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(
            f"SELECT '{t}', count(*) FROM {connection.ops.quote_name(t)}" for t in tables))  # noqa: S608 - table names from introspection
        return dict(cursor.fetchall())


def insert_delete_marks() -> tuple[int, int]:
    """Inserts and deletes attempted so far in this transaction (PostgreSQL's per-transaction statistics).
    Unchanged marks prove unchanged row counts, so ``table_counts`` is only needed when they moved."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_del), 0) "
                       "FROM pg_stat_xact_user_tables")
        ins, dels = cursor.fetchone()
        return int(ins), int(dels)


def database_dump(tables: list[str] | None = None) -> str:
    """Every row of the given (default: all) tables as text."""
    tables = tables or sorted(connection.introspection.table_names())
    out = []
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"SELECT t::text FROM {connection.ops.quote_name(table)} t")  # noqa: S608
            out.extend(row[0] for row in cursor.fetchall())
    return "\n".join(out)


def error_shape_problem(response) -> str | None:
    """None if the response body is the contract's error body."""
    try:
        body = json.loads(response.content)
    except ValueError:
        return f"not JSON: {response.content[:120]!r}"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return f"no 'error' object: {body!r:.200}"
    if not (isinstance(error.get("code"), str) and error["code"].startswith("E_")):
        return f"bad code: {error!r:.200}"
    if not isinstance(error.get("message"), str) or not isinstance(error.get("details"), dict):
        return f"bad message/details: {error!r:.200}"
    return None

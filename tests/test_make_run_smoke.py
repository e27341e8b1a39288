"""`make run`'s path on SQLite, over real HTTP: the product the spec promises "on a fresh machine with
only Python" must serve its console and API on SQLite, while the rest of the suite runs on PostgreSQL.

One subprocess prepares a SQLite database in a temporary LEDGERFLOW_VAR_DIR exactly as
scripts/run_dev.py does (migrate, collectstatic, the console users, an API key, the demo data, a
station); gunicorn serves it (config.settings, the filesystem broker); then the test logs in like an
operator and reads every console page the demo data reaches, previews every repair offered on the
demo orders, and checks the API. Every page must answer 200 with no traceback, in the page or in
the server's log. (The console once crashed here: its SQL was PostgreSQL-only.)
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest
import requests

ROOT = Path(__file__).resolve().parents[1]
OPERATOR, PASSWORD = "operator", "ledgerflow-demo"

# The commands of scripts/run_dev.py, in one interpreter (a Django start-up each costs seconds).
PREPARE = f"""
import json, django
from io import StringIO
from django.core.management import call_command

django.setup()

def run(*args):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip()

run("migrate", "--noinput", "-v", "0")
run("collectstatic", "--noinput", "-v", "0")
run("create_console_user", "--username", "{OPERATOR}", "--password", "{PASSWORD}", "--role", "operator", "--update")
run("create_console_user", "--username", "support", "--password", "{PASSWORD}", "--role", "support", "--update")
api_key = run("create_api_key", "--name", "smoke", "--scopes", "*")
run("seed_demo")
station = json.loads(run("create_station", "--name", "smoke-station").splitlines()[-1])
print(json.dumps({{"api_key": api_key, "station": station}}))
"""


def _environment(var: Path) -> dict[str, str]:
    # Only what make run sets: none of the suite's PostgreSQL/Redis settings may leak in.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DATABASE_", "CELERY_", "DJANGO_", "LEDGERFLOW_", "OUTBOX_", "PAYMENT", "STRIPE_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DJANGO_DEBUG="1",  # as make run: a crash renders Django's traceback page, which the checks look for
        DATABASE_URL=f"sqlite:///{var / 'db.sqlite3'}",
        LEDGERFLOW_VAR_DIR=str(var),
        CELERY_BROKER_URL="filesystem://",
        PAYMENT_PROVIDER="sandbox",
        STRIPE_API_BASE="http://127.0.0.1:9",  # nothing delivers outbox work here (no worker is started)
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    var = tmp_path_factory.mktemp("make-run")
    for sub in ("logs", "prints", "broker/out", "broker/processed"):  # as run_dev.py
        (var / sub).mkdir(parents=True)
    env = _environment(var)
    prepared = subprocess.run([sys.executable, "-c", PREPARE], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
    assert prepared.returncode == 0, prepared.stderr[-4000:]
    facts = json.loads(prepared.stdout.strip().splitlines()[-1])

    log_path = var / "logs" / "web.log"
    with open(log_path, "w") as log:
        web = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "config.wsgi", "-b", "127.0.0.1:0", "--workers", "1",
             "--threads", "4", "--timeout", "60"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = _wait_for_listening(web, log_path)
        yield {"base": base, "var": var, "db": var / "db.sqlite3", "log": log_path, **facts}
    finally:
        web.terminate()
        try:
            web.wait(15)
        except subprocess.TimeoutExpired:
            web.kill()


def _wait_for_listening(web: subprocess.Popen, log_path: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"Listening at: (http://127\.0\.0\.1:\d+)", log_path.read_text())
        if found:
            return found.group(1)
        if web.poll() is not None:
            break
        time.sleep(0.1)
    pytest.fail(f"gunicorn did not start:\n{log_path.read_text()[-4000:]}")


def _rows(db: Path, sql: str, params=()) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql, params).fetchall()


def _ok(response: requests.Response, what: str) -> requests.Response:
    assert response.status_code == 200, f"{what}: {response.status_code}\n{response.text[:3000]}"
    assert "Traceback" not in response.text, f"{what}: a traceback\n{response.text[:3000]}"
    return response


def _csrf(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)


def _links(base: str, page: str, html: str, pattern: str) -> list[str]:
    out = []
    for href in re.findall(r'(?:href|action)="([^"#]+)"', html):  # links, and forms (the repairs)
        url = urlparse(urljoin(base + page, href.replace("&amp;", "&")))
        path = url.path + (f"?{url.query}" if url.query else "")
        if re.match(pattern, path) and path not in out:
            out.append(path)
    return out


def test_make_run_on_sqlite_serves_the_api_and_every_console_page(site):
    base, db = site["base"], site["db"]
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {site['api_key']}"

    # --- the API, and work in flight for every app (no worker runs: it stays owed) ---------------
    _ok(requests.get(f"{base}/healthz"), "/healthz")
    ready = requests.get(f"{base}/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok", "broker": "ok"}, ready.text
    _ok(requests.get(f"{base}/api/v1/docs"), "/api/v1/docs")
    _ok(requests.get(f"{base}/api/v1/schema"), "/api/v1/schema")
    [(cart_id,)] = _rows(db, "SELECT id FROM orders_cart WHERE state = 'active'")
    checkout = api.post(f"{base}/api/v1/checkout", json={"cart_id": cart_id}, headers={"Idempotency-Key": "smoke"})
    assert checkout.status_code == 201, checkout.text
    order_id = checkout.json()["id"]
    job = api.post(f"{base}/api/v1/print-jobs", headers={"Idempotency-Key": "smoke-job"}, json={
        "station_id": site["station"]["station_id"], "content_base64": "SGVsbG8K", "content_type": "text",
        "title": "smoke", "business_object": {"type": "orders.order", "id": str(order_id)}})
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    assert _rows(db, "SELECT count(*) FROM payments_paymentattempt") == [(1,)]
    assert _rows(db, "SELECT count(*) FROM workflow_outboxitem WHERE state = 'pending'")[0][0] >= 1
    # … and its wake-ups were published to the embedded broker, all of it under the var folder
    assert list((site["var"] / "broker" / "out").glob("*.msg"))
    assert list((site["var"] / "broker" / "control").glob("*.exchange"))

    # --- an operator logs in through the form (CSRF token from the page) -----------------------
    console = requests.Session()
    login = _ok(console.get(f"{base}/console/login/"), "login form")
    landed = console.post(f"{base}/console/login/", data={
        "username": OPERATOR, "password": PASSWORD, "csrfmiddlewaretoken": _csrf(login.text)},
        headers={"Referer": f"{base}/console/login/"})
    _ok(landed, "login")
    assert urlparse(landed.url).path == "/console/" and "Waiting" in landed.text

    pages = [
        "/console/",
        "/console/waiting/",
        "/console/waiting/?machine=orders.order&sort=-age",
        "/console/waiting/?classification=evidence_conflicts&sort=attempts",
        "/console/waiting/?machine=orders.order&state=refund_pending&older_than_minutes=0&sort=next_retry",
        "/console/waiting/?classification=waiting_normally&sort=classification",
        "/console/waiting/?sort=machine&page=2",
        f"/console/did-it-print/?q={job_id}",
        "/console/search/?q=1",
        "/console/outbox/dead/",
        "/console/diagrams/",
    ]
    for page in pages:
        _ok(console.get(base + page), page)
    waiting = console.get(f"{base}/console/waiting/?machine=orders.order").text
    assert f'data-id="{order_id}"' in waiting  # the order placed above, with its owed work

    # --- the detail page of every demo order and of one record of every other machine ----------
    details = [f"/console/orders.order/{pk}/" for (pk,) in _rows(db, "SELECT id FROM orders_order ORDER BY id")]
    assert len(details) >= 12
    tables = dict(_rows(db, "SELECT name, name FROM sqlite_master WHERE type = 'table'"))
    from workflow.machine import machines

    for model in machines():
        label, table = model.aggregate_label(), model._meta.db_table
        if label == "orders.order" or table not in tables:
            continue  # orders are all visited; test-only machines have no table in make run's database
        for (pk,) in _rows(db, f"SELECT id FROM {table} ORDER BY id LIMIT 1"):  # noqa: S608 - model table name
            details.append(f"/console/{label}/{pk}/")
    visited = {d.split("/")[2] for d in details}
    assert {"orders.order", "orders.cart", "orders.reservation", "payments.paymentattempt", "printing.printjob",
            "workflow.outboxitem"} <= visited
    diagrams: list[str] = []
    repairs: list[str] = []
    for page in details:
        html = _ok(console.get(base + page), page).text
        diagrams += _links(base, page, html, r"^/console/diagrams/[\w.]+\.svg")
        repairs += _links(base, page, html, r"^/console/[\w.]+/\d+/repair/[\w-]+/$")
    diagrams += _links(base, "/console/diagrams/", console.get(f"{base}/console/diagrams/").text,
                       r"^/console/diagrams/[\w.]+\.svg")
    for svg in dict.fromkeys(diagrams):
        assert "<svg" in _ok(console.get(base + svg), svg).text

    # --- every repair offered: its form, and its preview (a dry run: nothing is written) --------
    assert repairs, "the demo orders offer repairs (release inventory, retry the refund, resolve review)"
    counts = "SELECT (SELECT count(*) FROM workflow_transition), (SELECT count(*) FROM workflow_outboxitem)"
    written = _rows(db, counts)
    for repair in repairs:
        form = _ok(console.get(base + repair), repair).text
        key = repair.rstrip("/").rsplit("/", 1)[1]
        choices = dict(re.findall(r'<select name="([^"]+)"[^>]*>\s*<option value="([^"]*)"', form))
        preview = console.post(base + repair, headers={"Referer": base + repair}, data={
            "csrfmiddlewaretoken": _csrf(form), "action": "preview", f"{key}-reason": "smoke test: preview only",
            **choices})
        _ok(preview, f"preview of {repair}")
    assert _rows(db, counts) == written

    log = site["log"].read_text()
    assert "Traceback" not in log, log[-4000:]


# The outbox delivers inside one transaction that reads first and writes after the provider answered;
# on SQLite's default (deferred) transactions, a write by anyone else in between made that transaction
# fail at once with "database is locked" (worker errors, and 500s on the API under a little load).
LOCKING = """
import sqlite3, sys, django
from django.db import connection, transaction

django.setup()
with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE deliveries (n integer)")
other = sqlite3.connect(sys.argv[1], timeout=0)  # another process's connection, not willing to wait
with transaction.atomic():
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM deliveries")  # read first …
    try:
        other.execute("BEGIN IMMEDIATE")  # … while someone else starts writing …
        print("another writer got in")
        other.execute("INSERT INTO deliveries VALUES (2)")
    except sqlite3.OperationalError:
        print("another writer waits")
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO deliveries VALUES (1)")  # … then write
other.execute("BEGIN IMMEDIATE")  # the transaction committed: the other writer's turn
other.execute("INSERT INTO deliveries VALUES (2)")
other.commit()
print(sorted(n for (n,) in other.execute("SELECT n FROM deliveries")))
"""


def test_on_sqlite_a_transaction_holds_the_write_lock_from_its_start(tmp_path):
    env = _environment(tmp_path)
    done = subprocess.run([sys.executable, "-c", LOCKING, str(tmp_path / "db.sqlite3")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == ["another writer waits", "[1, 2]"]

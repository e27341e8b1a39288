"""Keeps `make bench` from rotting: every case runs for about a second on tiny data, end to end (own
database, COPY, gunicorn, celery workers, EXPLAIN). No timing is asserted: only that each case ran,
produced its rows, and that the correctness checks inside the cases held."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "latest.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    database_url = f"postgres://postgres@127.0.0.1:5432/ledgerflow_benchsmoke_{os.getpid()}"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--database-url", database_url, "--output", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(out.read_text()), proc.stdout, out.parent


def _rows(report, case):
    return [r for r in report["rows"] if r["case"] == case]


def test_every_case_produces_rows_with_ops(smoke_run):
    # Given a smoke run of every case / Then each case has measured rows that did work
    report, _, _ = smoke_run
    for case in ("1 floor", "2 kernel", "3 naive", "4 http", "5 outbox", "6 scale"):
        rows = _rows(report, case)
        assert rows, case
        assert all(r["ops"] > 0 for r in rows), (case, rows)


def test_ratios_are_computed_against_the_same_run(smoke_run):
    report, _, _ = smoke_run
    kernel = _rows(report, "2 kernel")
    assert all(r["ratio"] is not None and r["baseline"].startswith("floor c") for r in kernel)
    celery = [r for r in _rows(report, "5 outbox") if r["variant"].startswith("celery")]
    assert [r["concurrency"] for r in celery] == [1, 2]
    assert all(r["baseline"].startswith("raw loop") for r in celery)


def test_webhook_path_answers_every_event_with_2xx(smoke_run):
    # Duplicates and out-of-order events are classified answers, never errors
    report, _, _ = smoke_run
    for row in _rows(report, "4 http"):
        assert row["kinds"]["non-2xx"] == 0, row
        assert row["kinds"].get("applied", 0) > 0, row


def test_replays_are_answered_already_applied(smoke_run):
    report, _, _ = smoke_run
    replay_only = [r for r in _rows(report, "2 kernel") if "replays only" in r["variant"]]
    assert replay_only and all(set(r["kinds"]) == {"replay"} for r in replay_only)


def test_print_claims_never_lease_a_job_twice(smoke_run):
    # Given stations polled concurrently / Then every claim is a distinct job, with one lease each
    report, _, _ = smoke_run
    rows = _rows(report, "7 print")
    if not rows:
        assert any("7 print claims: not yet" in line for line in report["notes"])
        return
    for row in rows:
        assert row["kinds"]["claimed"] > 0, row
        assert row["kinds"]["non-2xx"] == 0, row
        assert (row["kinds"]["double_client"], row["kinds"]["double_db"], row["kinds"]["fenced_twice"]) == (0, 0, 0)


def test_table_and_explain_files(smoke_run):
    report, stdout, results_dir = smoke_run
    assert "| ops/s |" in stdout
    assert "Index Scan" in (results_dir / "explain_waiting_states_large.txt").read_text()

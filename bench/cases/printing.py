"""Case 7, print claims: 50 stations polling ``POST /api/v1/station/claim`` over gunicorn at once, and
proof that no job is leased twice.

Jobs are generated with COPY (pending, spread over the stations). 50 poller threads each pick a random
station for every poll, so two pollers often claim for the same station at the same moment (what two
station processes, or a retry racing its original, look like). Proof, two-sided: every job id the
pollers received is distinct, and in the database no job has more than one applied ``claimed``
transition nor a fencing token (lease_generation) above 1.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import random
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from django.apps import apps

from .. import db, processes
from ..measure import Row, Worker, fill_latency, run_concurrent

STATIONS = 50
PATH = "/api/v1/station/claim"
CONTENT = b"^XA^FO50,50^FDLedgerflow bench^FS^XZ"


def printing_available() -> bool:
    try:
        config = apps.get_app_config("printing")
    except LookupError:
        return False
    if not any(m.__name__ == "PrintJob" for m in config.get_models()):
        return False
    from django.urls import NoReverseMatch, reverse

    try:
        reverse("station-claim")
    except NoReverseMatch:
        return False
    return True


def generate(conn, *, stations: int, jobs: int) -> list[str]:
    """Stations through the service (their tokens are only known at creation), jobs with COPY."""
    from printing.models import PrintJob
    from printing.services import station_create

    tokens = [station_create(name=f"bench station {n}")[1] for n in range(stations)]
    from printing.models import Station

    station_ids = list(Station.objects.filter(name__startswith="bench station ").values_list("id", flat=True))
    table = PrintJob._meta.db_table
    now = datetime.now(UTC)
    expires = now + timedelta(hours=6)
    sha = hashlib.sha256(CONTENT).hexdigest()
    content = "\\x" + CONTENT.hex()
    columns = [
        "state_version",
        "entered_state_at",
        "created_at",
        "updated_at",
        "state",
        "station_id",
        "title",
        "copies",
        "content_type",
        "content",
        "content_size",
        "content_sha256",
        "expires_in_seconds",
        "expires_at",
        "business_object_type",
        "business_object_id",
        "submitted_by",
        "lease_generation",
        "lease_token",
        "os_job_id",
        "failure_reason",
        "unknown_reason",
        "settled_by",
    ]
    rows = (
        [
            1,
            now,
            now + timedelta(microseconds=i),
            now,
            "pending",
            station_ids[i % len(station_ids)],
            f"label {i}",
            1,
            "raw-zpl",
            content,
            len(CONTENT),
            sha,
            6 * 3600,
            expires,
            "",
            "",
            "bench",
            0,
            "",
            "",
            "",
            "",
            "",
        ]
        for i in range(jobs)
    )
    db._copy(conn, table, columns, rows)
    conn.commit()
    db.analyze(conn)
    return tokens


class StationPoller(Worker):
    def __init__(self, port: int, tokens: list[str], seed: int, claimed: list[int], failures: list[str]) -> None:
        self.port, self.tokens, self.claimed, self.failures = port, tokens, claimed, failures
        self.rng = random.Random(seed)

    def setup(self) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def op(self) -> str:
        token = self.rng.choice(self.tokens)
        try:
            self.conn.request(
                "POST",
                PATH,
                body=b'{"wait_seconds": 0}',
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
            )
            response = self.conn.getresponse()
            raw = response.read()
        except (http.client.HTTPException, OSError):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            raise
        if not 200 <= response.status < 300:
            self.failures.append(f"{response.status} {raw[:200]!r}")
            return "non-2xx"
        job = json.loads(raw).get("job")
        if job is None:
            return "empty"
        self.claimed.append(int(job["id"]))
        return "claimed"

    def teardown(self) -> None:
        self.conn.close()


def run(conn, *, pollers: int, jobs: int, duration: float, log: Callable[[str], None]) -> tuple[list[Row], str]:
    if not printing_available():
        return [], (
            "7 print claims: not yet -- printing.PrintJob and its station claim endpoint are not on "
            "main; the case is skipped"
        )
    tokens = generate(conn, stations=STATIONS, jobs=jobs)
    port = processes.free_port()
    server = processes.start(
        [
            str(processes.BIN / "gunicorn"),
            "config.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--worker-class",
            "gthread",
            "--threads",
            "8",
            "--keep-alive",
            "30",
            "--backlog",
            "256",
            "--log-level",
            "warning",
        ],
        log_name="gunicorn-printing",
    )
    claimed: list[int] = []
    failures: list[str] = []
    try:
        processes.wait_http(port, proc=server)
        log(f"print claims: {STATIONS} stations, {jobs} pending jobs, {pollers} pollers over gunicorn :{port}")
        seconds, latencies, kinds = run_concurrent(
            lambda n: StationPoller(port, tokens, 700 + n, claimed, failures),
            concurrency=pollers,
            duration=duration,
            warmup=min(1.0, duration / 5),
        )
    finally:
        processes.stop(server)
    double_client = len(claimed) - len(set(claimed))
    double_db = conn.execute(
        "SELECT count(*) FROM (SELECT aggregate_id FROM workflow_transition WHERE aggregate_type = 'printing.printjob'"
        " AND event_type = 'claimed' AND result = 'applied' GROUP BY aggregate_id HAVING count(*) > 1) twice"
    ).fetchone()[0]
    fenced_twice = conn.execute("SELECT count(*) FROM printing_printjob WHERE lease_generation > 1").fetchone()[0]
    conn.commit()
    kinds.setdefault("non-2xx", 0)
    row = Row(
        case="7 print",
        variant=f"station claims, {STATIONS} stations",
        concurrency=pollers,
        ops=kinds.get("claimed", 0),
        seconds=seconds,
        kinds=dict(kinds),
    )
    row.notes = (
        f"polls={sum(kinds.values())} claimed={kinds.get('claimed', 0)} empty={kinds.get('empty', 0)} "
        f"non-2xx={kinds['non-2xx']}; leased twice: client {double_client}, db {double_db}, "
        f"fencing>1 {fenced_twice}"
    )
    row.kinds.update({"double_client": double_client, "double_db": double_db, "fenced_twice": fenced_twice})
    if failures:
        row.notes += f"; first failure: {failures[0][:160]}"
        print(f"print claim failures: {failures[:3]}", file=sys.stderr)
    return [fill_latency(row, latencies)], ""

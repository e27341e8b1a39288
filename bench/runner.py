"""`python -m bench`: prepare the bench database, run every case, print one table, write JSON."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import uuid
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/ledgerflow_bench"
DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/12"  # a redis db of the bench's own; queues are per run too
ALL_CASES = ("floor", "kernel", "naive", "http", "outbox", "scale", "printing")


@dataclasses.dataclass(frozen=True)
class Plan:
    aggregates: int = 100_000
    payment_attempts: int = 100_000
    print_pollers: int = 50
    print_jobs: int = 30_000
    duration: float = 5.0
    rounds: int = 3  # interleaved windows per variant in cases 1-3 (see bench/interleave.py)
    concurrencies: tuple[int, ...] = (1, 16)
    http_concurrencies: tuple[int, ...] = (1, 8, 32)
    replay_fraction: float = 0.30
    outbox_backlog: int = 50_000
    drain_seconds: float = 8.0
    scale_small: int = 10_000
    scale_large: int = 1_000_000
    scale_ops: int = 400
    scale_queries: int = 100


SMOKE = Plan(
    aggregates=20_000,
    payment_attempts=4000,
    print_pollers=10,
    print_jobs=2000,
    duration=1.0,
    rounds=2,
    concurrencies=(1, 4),
    http_concurrencies=(1, 4),
    outbox_backlog=1500,
    drain_seconds=1.0,
    scale_small=1000,
    scale_large=5000,
    scale_ops=30,
    scale_queries=10,
)


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def configure_environment(database_url: str, broker_url: str) -> str:
    queue = f"bench.{uuid.uuid4().hex[:10]}"
    os.environ["DATABASE_URL"] = database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    os.environ["CELERY_BROKER_URL"] = broker_url
    os.environ["BENCH_QUEUE"] = queue
    os.environ.setdefault("DATABASE_CONN_MAX_AGE", "600")
    return queue


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, about a second per case")
    parser.add_argument("--cases", default=",".join(ALL_CASES), help=f"comma-separated subset of {ALL_CASES}")
    parser.add_argument("--duration", type=float, help="seconds per timed case")
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL))
    parser.add_argument("--broker-url", default=os.environ.get("BENCH_BROKER_URL", DEFAULT_BROKER_URL))
    parser.add_argument(
        "--subject",
        choices=["bench_order", "order"],
        default=os.environ.get("BENCH_SUBJECT", "bench_order"),
        help="the machine cases 1, 2, 6 and the bench endpoint of 4 drive (bench/subject.py)",
    )
    parser.add_argument("--output", default=str(RESULTS_DIR / "latest.json"))
    parser.add_argument("--keep-database", action="store_true", help="leave the bench database behind")
    parser.add_argument(
        "--profile",
        choices=["kernel", "naive", "deliver"],
        help="profile one case at concurrency 1 with pyinstrument instead of the table",
    )
    args = parser.parse_args(argv)

    plan = SMOKE if args.smoke else Plan()
    if args.duration:
        plan = dataclasses.replace(plan, duration=args.duration)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(cases) - set(ALL_CASES)
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}")

    os.environ["BENCH_SUBJECT"] = args.subject  # read by bench.subject (and by gunicorn's workers)
    queue = configure_environment(args.database_url, args.broker_url)
    from . import db

    started = time.monotonic()
    _log(f"database {db.db_name(args.database_url)}: recreating and migrating; broker queue {queue}")
    db.recreate_database(args.database_url)
    import django

    django.setup()
    db.migrate()
    from .suite import Suite

    suite = Suite(
        plan=plan,
        queue=queue,
        broker_url=args.broker_url,
        log=_log,
        output=Path(args.output),
        smoke=args.smoke,
    )
    try:
        if args.profile:
            return suite.profile(args.profile)
        suite.run(cases)
    finally:
        suite.close()
        from .cases.outbox import purge_queue

        try:
            purge_queue(args.broker_url, queue)  # kernel/naive cases leave their after-commit messages there
        except Exception as exc:  # noqa: BLE001 - a broker hiccup must not hide the results
            _log(f"could not purge broker queue {queue}: {exc}")
        if not args.keep_database:
            from django.db import connections

            connections.close_all()
            db.drop_database(args.database_url)
    _log(f"done in {time.monotonic() - started:.0f}s")
    return 0

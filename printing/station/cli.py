"""``python -m printing.station --api URL --token TOKEN --ledger PATH --output cups:QUEUE|dir:PATH``"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from .client import StationClient
from .ledger import Ledger
from .outputs import make_output
from .runner import Station


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m printing.station",
        description="Ledgerflow print station: pulls print jobs and prints them.",
    )
    p.add_argument("--api", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument(
        "--token",
        default=os.environ.get("LEDGERFLOW_STATION_TOKEN"),
        help="station token from create_station (or $LEDGERFLOW_STATION_TOKEN)",
    )
    p.add_argument("--ledger", required=True, help="SQLite ledger file (kept across restarts)")
    p.add_argument("--output", required=True, help="cups:QUEUE (prints with lp) or dir:PATH (writes files)")
    p.add_argument("--spool", help="where received content waits to be printed (default: <ledger>.spool)")
    p.add_argument("--lp-option", action="append", default=[], help="extra `lp -o` option (repeatable)")
    p.add_argument("--poll-wait", type=float, default=20.0, help="long-poll wait per claim, seconds")
    p.add_argument("--heartbeat-seconds", type=float, default=15.0)
    p.add_argument(
        "--follow-seconds",
        type=float,
        default=30.0,
        help="how long to watch an OS job before going back to claiming (watching continues)",
    )
    p.add_argument(
        "--max-print-delay",
        type=float,
        default=600.0,
        help="never print a job received longer ago than this (e.g. after a long outage)",
    )
    p.add_argument("--until-idle", action="store_true", help="exit once nothing is left to do (tests, cron)")
    p.add_argument("--max-jobs", type=int, help="exit after handing this many new jobs to the OS")
    p.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s station %(levelname)s %(message)s",
    )
    if not args.token:
        print("--token is required (or set LEDGERFLOW_STATION_TOKEN)", file=sys.stderr)
        return 2
    try:
        output = make_output(args.output, lp_options=args.lp_option)
        client = StationClient(args.api, args.token)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    ledger = Ledger(args.ledger)
    spool = Path(args.spool) if args.spool else Path(str(args.ledger) + ".spool")
    station = Station(
        client,
        ledger,
        output,
        spool_dir=spool,
        poll_wait=args.poll_wait,
        heartbeat_every=args.heartbeat_seconds,
        follow_seconds=args.follow_seconds,
        max_print_delay=args.max_print_delay,
    )
    station.install_signal_handlers()
    logging.getLogger("ledgerflow.station").info(
        "station started: %s, ledger %s", output.describe(), args.ledger
    )
    try:
        return station.run(until_idle=args.until_idle, max_jobs=args.max_jobs)
    finally:
        ledger.close()

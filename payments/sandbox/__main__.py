"""``python -m payments.sandbox --port 12111 [--db PATH] [--webhook-url URL --webhook-secret S]``."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from .server import serve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="payments.sandbox", description="Stripe-compatible sandbox provider"
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=12111, help="0 picks a free port (announced on stdout)")
    parser.add_argument(
        "--db",
        default=os.environ.get("SANDBOX_PROVIDER_DB", "var/sandbox-provider.sqlite3"),
        help="the sandbox's own ledger (SQLite); ':memory:' keeps nothing",
    )
    parser.add_argument(
        "--api-key",
        action="append",
        default=[],
        help="accepted secret key (repeatable); default: any sk_test_… key",
    )
    parser.add_argument("--webhook-url", default=os.environ.get("SANDBOX_WEBHOOK_URL"))
    parser.add_argument("--webhook-secret", default=os.environ.get("SANDBOX_WEBHOOK_SECRET", "whsec_sandbox"))
    parser.add_argument("--webhook-retry-base-seconds", type=float, default=1.0)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run(args)


def run(args: argparse.Namespace) -> None:
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "WARNING"))
    if args.db not in (":memory:", "") and os.path.dirname(args.db):
        os.makedirs(os.path.dirname(args.db), exist_ok=True)
    serve(
        host=args.host,
        port=args.port,
        db_path=args.db or ":memory:",
        api_keys=args.api_key,
        webhook_url=args.webhook_url,
        webhook_secret=args.webhook_secret,
        webhook_retry_base_seconds=args.webhook_retry_base_seconds,
        announce=lambda line: (print(line), sys.stdout.flush()),
    )


if __name__ == "__main__":
    main()

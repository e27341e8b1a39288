"""``python manage.py run_sandbox_provider --port 12111``: serve the Stripe-compatible sandbox provider."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from payments.sandbox.__main__ import add_arguments, run


class Command(BaseCommand):
    help = "Serve the Stripe-compatible sandbox payment provider (its own ledger, signed webhooks, faults)."

    def add_arguments(self, parser):
        add_arguments(parser)
        # Default the webhook secret to the first one the app accepts, so `make run` works unconfigured.
        secrets = getattr(settings, "STRIPE_WEBHOOK_SECRETS", None) or ["whsec_sandbox"]
        parser.set_defaults(webhook_secret=secrets[0], db=str(settings.VAR_DIR / "sandbox-provider.sqlite3"))

    def handle(self, *args, **options):
        run(_Namespace(options))


class _Namespace:
    def __init__(self, options: dict) -> None:
        self.__dict__.update(options)

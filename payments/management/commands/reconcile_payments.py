"""``manage.py reconcile_payments [--since-hours 72] [--grace-seconds 300]``: prints the report as JSON."""

import json

from django.core.management.base import BaseCommand

from payments.reconciliation import reconciliation_run


class Command(BaseCommand):
    help = "Compare provider intents/refunds with local facts; record discrepancies with proposed repairs."

    def add_arguments(self, parser):
        parser.add_argument("--since-hours", type=float, default=72)
        parser.add_argument("--grace-seconds", type=float, default=300)

    def handle(self, *args, **options):
        report = reconciliation_run(
            since_hours=options["since_hours"], grace_seconds=options["grace_seconds"]
        )
        self.stdout.write(json.dumps(report.as_dict(), indent=2, default=str))

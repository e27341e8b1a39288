import json

from django.core.management.base import BaseCommand

from orders.services.recovery import checkouts_reconcile_stuck


class Command(BaseCommand):
    help = "Resume or unwind checkouts whose cart stayed checking_out beyond the grace period (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--grace-seconds", type=int, default=None)

    def handle(self, *args, grace_seconds=None, **options):
        for result in checkouts_reconcile_stuck(grace_seconds=grace_seconds):
            self.stdout.write(json.dumps(result, default=str))

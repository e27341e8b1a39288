from django.core.management.base import BaseCommand, CommandError

from workflow.machine import machines
from workflow.selectors import history_mismatches


class Command(BaseCommand):
    help = "Replay the transition history of every machine and report aggregates whose row differs."

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=1000, help="at most this many reports per machine")

    def handle(self, *args, limit: int, **options):
        problems = 0
        for model in machines():
            count = model.objects.count()
            mismatches = history_mismatches(model, limit=limit)
            problems += len(mismatches)
            self.stdout.write(f"{model.aggregate_label()}: {count} aggregates, {len(mismatches)} mismatches")
            for m in mismatches:
                self.stdout.write(f"  #{m.aggregate_id}: row={m.row_state}@v{m.row_version} "
                                  f"replay={m.replayed_state}@v{m.replayed_version} — {m.problem}")
        if problems:
            raise CommandError(f"{problems} aggregate(s) disagree with their history")
        self.stdout.write(self.style.SUCCESS("history replay matches every aggregate"))

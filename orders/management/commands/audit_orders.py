from django.core.management.base import BaseCommand, CommandError

from orders.selectors import invariant_violations


class Command(BaseCommand):
    help = "List violated order/cart/reservation invariants; exits non-zero when there are any."

    def handle(self, *args, **options):
        violations = invariant_violations()
        for v in violations:
            self.stdout.write(f"{v.invariant}\t{v.aggregate_type}#{v.aggregate_id}\t{v.detail}")
        if violations:
            raise CommandError(f"{len(violations)} invariant violation(s)")
        self.stdout.write("no invariant violations")

from django.core.management.base import BaseCommand, CommandError

from ops_console.services import console_user_create
from workflow.errors import LedgerflowError


class Command(BaseCommand):
    help = "Create or update a console user with the support (read) or operator (repair) role."

    def add_arguments(self, parser):
        parser.add_argument("--username", required=True)
        parser.add_argument("--password", required=True)
        parser.add_argument("--role", required=True, choices=["support", "operator"])

    def handle(self, *args, username, password, role, **options):
        try:
            console_user_create(username=username, password=password, role=role)
        except LedgerflowError as exc:
            raise CommandError(str(exc))
        self.stdout.write(f"console user {username!r} has the {role} role; log in at /console/login/")

from django.core.management.base import BaseCommand, CommandError

from ops_console.services import console_user_create
from workflow.errors import LedgerflowError


class Command(BaseCommand):
    help = "Create or update a console user with the support (read) or operator (repair) role."

    def add_arguments(self, parser):
        parser.add_argument("--username", required=True)
        parser.add_argument("--password", required=True)
        parser.add_argument("--role", required=True, choices=["support", "operator"])
        # An existing user is always updated (password and role); the flag is accepted so scripts can say so.
        parser.add_argument("--update", action="store_true", help="update the user if it exists (the default)")

    def handle(self, *args, username, password, role, update=False, **options):
        try:
            console_user_create(username=username, password=password, role=role)
        except LedgerflowError as exc:
            raise CommandError(str(exc))
        self.stdout.write(f"console user {username!r} has the {role} role; log in at /console/login/")

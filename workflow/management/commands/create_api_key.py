from django.core.management.base import BaseCommand, CommandError

from workflow.auth import create_api_key


class Command(BaseCommand):
    help = "Create an integrator API key and print only the key (it is stored hashed and never shown again)."

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        parser.add_argument("--scopes", required=True, help="comma-separated, e.g. orders:write,orders:read or *")

    def handle(self, *args, name: str, scopes: str, **options):
        scope_list = [s.strip() for s in scopes.split(",") if s.strip()]
        if not scope_list:
            raise CommandError("--scopes needs at least one scope")
        _, raw = create_api_key(name=name, scopes=scope_list)
        self.stdout.write(raw)

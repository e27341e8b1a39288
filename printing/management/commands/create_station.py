import json

from django.core.management.base import BaseCommand

from printing.services import station_create


class Command(BaseCommand):
    help = 'Create a print station; prints {"station_id": …, "token": …} (the token is shown only now).'

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)

    def handle(self, *args, name: str, **options):
        station, token = station_create(name=name)
        self.stdout.write(json.dumps({"station_id": station.pk, "token": token}))

from django.apps import AppConfig


class PrintingConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "printing"

    def ready(self) -> None:
        from . import effects  # noqa: F401  (outbox handlers: signed webhooks)

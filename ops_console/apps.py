from django.apps import AppConfig


class OpsConsoleConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "ops_console"
    verbose_name = "Operations console"

    def ready(self) -> None:
        from . import admin, console, integrations  # noqa: F401 - registrations

        admin.register_unregistered_machines()
        integrations.load()

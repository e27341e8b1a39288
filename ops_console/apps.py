from django.apps import AppConfig


class OpsConsoleConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "ops_console"

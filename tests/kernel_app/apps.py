from django.apps import AppConfig


class KernelAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "tests.kernel_app"
    label = "kernel_app"

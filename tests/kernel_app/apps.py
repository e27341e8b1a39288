from django.apps import AppConfig


class KernelAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "tests.kernel_app"
    label = "kernel_app"

    def ready(self) -> None:
        from workflow.outbox import effect_handler

        effect_handler("parcel.notify", max_attempts=5)(notify)


def notify(item):
    """The parcel machine's outside work: nothing to do in tests unless a test replaces it."""
    return None

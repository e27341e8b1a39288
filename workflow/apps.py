from django.apps import AppConfig


class WorkflowConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "workflow"
    verbose_name = "Workflow kernel"

    def ready(self) -> None:
        from . import auth, converters, effects  # noqa: F401  (API key principal attributes; built-in effect handlers)

        converters.register()  # <id:…> path parameters, before any URL conf is loaded

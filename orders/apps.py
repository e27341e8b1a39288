from django.apps import AppConfig


class OrdersConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "orders"

    def ready(self) -> None:
        from payments import hooks

        from . import effects  # noqa: F401  (outbox handlers)
        from .payments_adapter import OWNER_TYPE, order_on_payment_fact

        hooks.subscribe(OWNER_TYPE, order_on_payment_fact)

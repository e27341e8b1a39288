from django.apps import AppConfig


class BenchAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "bench.bench_app"
    label = "bench_app"

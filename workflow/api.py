"""Liveness and readiness."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from .access import PUBLIC, declare_access


@declare_access(PUBLIC, why="liveness for load balancers")
@require_GET
def healthz(request):
    return JsonResponse({"status": "ok"})


@declare_access(PUBLIC, why="readiness for load balancers; says nothing secret")
@require_GET
def readyz(request):
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # noqa: BLE001 - readiness reports any failure
        checks["database"] = f"error: {exc.__class__.__name__}"
    try:
        from config.celery import app

        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        checks["broker"] = "ok"
    except Exception as exc:  # noqa: BLE001
        checks["broker"] = f"error: {exc.__class__.__name__}"
    ready = all(v == "ok" for v in checks.values())
    return JsonResponse({"status": "ready" if ready else "not_ready", "checks": checks,
                         "payment_provider": settings.PAYMENT_PROVIDER}, status=200 if ready else 503)

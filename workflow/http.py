"""Plain-Django fallbacks so that even errors raised outside DRF keep the contract's body on /api/."""

from __future__ import annotations

import logging

from django.http import JsonResponse

from .errors import ErrorCode, error_body

logger = logging.getLogger(__name__)


def _is_api(request) -> bool:
    return request.path.startswith("/api/")


class ApiErrorMiddleware:
    """Renders uncaught exceptions and Django-level 404s/405s on /api/ as the contract's error body."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        from .inputs import body_too_large

        if _is_api(request) and body_too_large(request):
            # Refused before any view runs: views that read the body lazily (or never) answer the same.
            return JsonResponse(error_body(ErrorCode.PAYLOAD_TOO_LARGE, "Request body is too large."), status=413)
        response = self.get_response(request)
        if _is_api(request) and response.status_code in (404, 405) and not _is_json(response):
            code = ErrorCode.NOT_FOUND if response.status_code == 404 else ErrorCode.METHOD_NOT_ALLOWED
            return JsonResponse(error_body(code, "Not found." if response.status_code == 404 else
                                           "Method not allowed."), status=response.status_code)
        return response

    def process_exception(self, request, exception):
        if not _is_api(request):
            return None
        from django.core.exceptions import RequestDataTooBig

        if isinstance(exception, RequestDataTooBig):
            return JsonResponse(error_body(ErrorCode.PAYLOAD_TOO_LARGE, "Request body is too large."), status=413)
        from django.db import OperationalError

        if isinstance(exception, OperationalError):
            # The database is restarting or dropped the connection: nothing of this request committed
            # beyond what an Idempotency-Key replay recovers, so tell the client to retry, not "bug".
            logger.warning("Database unavailable on %s: %s", request.path, exception)
            response = JsonResponse(error_body(ErrorCode.UNAVAILABLE, "The database is unavailable; retry shortly "
                                               "with the same Idempotency-Key."), status=503)
            response["Retry-After"] = "1"
            return response
        logger.exception("Unhandled error on %s", request.path)
        return JsonResponse(error_body(ErrorCode.INTERNAL, "Internal error."), status=500)


def _is_json(response) -> bool:
    return response.get("Content-Type", "").startswith("application/json")


def json_not_found(request, exception=None):
    if _is_api(request):
        return JsonResponse(error_body(ErrorCode.NOT_FOUND, "Not found."), status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def json_server_error(request):
    if _is_api(request):
        return JsonResponse(error_body(ErrorCode.INTERNAL, "Internal error."), status=500)
    from django.views.defaults import server_error

    return server_error(request)

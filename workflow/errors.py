"""Stable error codes and the one place that renders them into the contract's error body.

Every failure a client can see is a ``LedgerflowError`` (or a DRF/Django exception mapped to one):
``{"error": {"code": "E_…", "message": "…", "details": {…}}}``.
"""

from __future__ import annotations

import enum
import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response

logger = logging.getLogger(__name__)


class ErrorCode(enum.StrEnum):
    VALIDATION = "E_VALIDATION"
    UNAUTHENTICATED = "E_UNAUTHENTICATED"
    SIGNATURE = "E_SIGNATURE"
    FORBIDDEN = "E_FORBIDDEN"
    NOT_FOUND = "E_NOT_FOUND"
    METHOD_NOT_ALLOWED = "E_METHOD_NOT_ALLOWED"
    UNSUPPORTED_MEDIA_TYPE = "E_UNSUPPORTED_MEDIA_TYPE"
    PAYLOAD_TOO_LARGE = "E_PAYLOAD_TOO_LARGE"
    STATE_TRANSITION = "E_STATE_TRANSITION"
    IDEMPOTENCY_CONFLICT = "E_IDEMPOTENCY_CONFLICT"
    IDEMPOTENCY_IN_PROGRESS = "E_IDEMPOTENCY_IN_PROGRESS"
    OUT_OF_STOCK = "E_OUT_OF_STOCK"
    WORKFLOW_FAILED = "E_WORKFLOW_FAILED"
    RATE_LIMITED = "E_RATE_LIMITED"
    INTERNAL = "E_INTERNAL"
    UNAVAILABLE = "E_UNAVAILABLE"


HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.VALIDATION: 400,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.SIGNATURE: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.STATE_TRANSITION: 409,
    ErrorCode.IDEMPOTENCY_CONFLICT: 409,
    ErrorCode.IDEMPOTENCY_IN_PROGRESS: 409,
    ErrorCode.OUT_OF_STOCK: 409,
    ErrorCode.WORKFLOW_FAILED: 422,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.INTERNAL: 500,
    ErrorCode.UNAVAILABLE: 503,
}


class LedgerflowError(Exception):
    """A failure with a stable code; ``status`` follows from the code unless given."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return HTTP_STATUS[self.code]


class ValidationFailed(LedgerflowError):
    code = ErrorCode.VALIDATION


class NotFound(LedgerflowError):
    code = ErrorCode.NOT_FOUND


class Forbidden(LedgerflowError):
    code = ErrorCode.FORBIDDEN


class SignatureInvalid(LedgerflowError):
    code = ErrorCode.SIGNATURE


class StateTransitionRejected(LedgerflowError):
    code = ErrorCode.STATE_TRANSITION


class IdempotencyConflict(LedgerflowError):
    code = ErrorCode.IDEMPOTENCY_CONFLICT


class IdempotencyInProgress(LedgerflowError):
    code = ErrorCode.IDEMPOTENCY_IN_PROGRESS


class OutOfStock(LedgerflowError):
    code = ErrorCode.OUT_OF_STOCK


class WorkflowFailed(LedgerflowError):
    code = ErrorCode.WORKFLOW_FAILED


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": str(code), "message": message, "details": details or {}}}


def _drf_details(detail: Any) -> dict[str, Any]:
    if isinstance(detail, dict):
        return {"fields": drf_exceptions._get_full_details(detail)} if detail else {}
    if isinstance(detail, list):
        return {"errors": [str(item) for item in detail]}
    return {}


def _flatten_messages(detail: Any) -> list[str]:
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            out.extend(f"{key}: {m}" for m in _flatten_messages(value))
        return out
    if isinstance(detail, list):
        out = []
        for value in detail:
            out.extend(_flatten_messages(value))
        return out
    return [str(detail)]


_DRF_CODES: list[tuple[type[Exception], ErrorCode]] = [
    (drf_exceptions.NotAuthenticated, ErrorCode.UNAUTHENTICATED),
    (drf_exceptions.AuthenticationFailed, ErrorCode.UNAUTHENTICATED),
    (drf_exceptions.PermissionDenied, ErrorCode.FORBIDDEN),
    (drf_exceptions.NotFound, ErrorCode.NOT_FOUND),
    (drf_exceptions.MethodNotAllowed, ErrorCode.METHOD_NOT_ALLOWED),
    (drf_exceptions.UnsupportedMediaType, ErrorCode.UNSUPPORTED_MEDIA_TYPE),
    (drf_exceptions.Throttled, ErrorCode.RATE_LIMITED),
    (drf_exceptions.ParseError, ErrorCode.VALIDATION),
    (drf_exceptions.ValidationError, ErrorCode.VALIDATION),
    (drf_exceptions.NotAcceptable, ErrorCode.VALIDATION),
]


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's EXCEPTION_HANDLER: every error leaves the API in the contract's shape."""
    if isinstance(exc, LedgerflowError):
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.status, headers=exc.headers)
    if isinstance(exc, Http404):
        return Response(error_body(ErrorCode.NOT_FOUND, "Not found."), status=404)
    if isinstance(exc, DjangoPermissionDenied):
        return Response(error_body(ErrorCode.FORBIDDEN, "You do not have permission to perform this action."), 403)
    if isinstance(exc, drf_exceptions.APIException):
        code = next((c for cls, c in _DRF_CODES if isinstance(exc, cls)), None)
        if code is None:
            code = ErrorCode.INTERNAL if exc.status_code >= 500 else ErrorCode.VALIDATION
        if isinstance(exc, drf_exceptions.ValidationError):
            messages = _flatten_messages(exc.detail)
            message = "Invalid input: " + "; ".join(messages[:5]) if messages else "Invalid input."
            details = _drf_details(exc.detail)
        else:
            message = str(exc.detail)
            details = {}
        headers = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
        status = exc.status_code
        if code is ErrorCode.UNAUTHENTICATED:
            status = 401
        return Response(error_body(code, message, details), status=status, headers=headers)
    return None

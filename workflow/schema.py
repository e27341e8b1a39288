"""OpenAPI post-processing: every operation documents the contract's error body for the errors it can give.

``{"error": {"code": "E_…", "message": "…", "details": {…}}}`` becomes the ``Error`` component; each
operation lists 400/401/403/404/413/415 (and 409 for POST) with it, unless it already documents that
status. The fuzzing test (tests/security/test_api_fuzzing.py) holds every answer to this document.
"""

from __future__ import annotations

from .errors import ErrorCode

ERROR_COMPONENT = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": {"type": "string", "enum": [c.value for c in ErrorCode]},
                "message": {"type": "string"},
                "details": {"type": "object", "additionalProperties": True},
            },
        }
    },
}

_WHY = {
    400: "E_VALIDATION: bad input (nothing written)",
    401: "E_UNAUTHENTICATED / E_SIGNATURE: no or bad credentials",
    403: "E_FORBIDDEN: the credentials lack the operation's scope",
    404: "E_NOT_FOUND: no such object (or not the caller's)",
    409: "E_STATE_TRANSITION / E_IDEMPOTENCY_*: refused by the object's state or a key's earlier use",
    413: "E_PAYLOAD_TOO_LARGE: body over the size limit",
    415: "E_UNSUPPORTED_MEDIA_TYPE: body is not application/json",
}


def add_error_responses(result, generator, request, public):
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_COMPONENT
    ref = {"$ref": "#/components/schemas/Error"}
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            statuses = [400, 401, 403, 404, 413, 415] + ([409] if method == "post" else [])
            responses = operation.setdefault("responses", {})
            for status in statuses:
                entry = responses.setdefault(str(status), {"description": _WHY[status]})
                entry.setdefault("content", {"application/json": {"schema": ref}})
    return result



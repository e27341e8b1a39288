"""Strict input for the API: what a request body may hold, checked before any view logic runs.

* ``StrictJSONParser`` (the API's parser): a body must be UTF-8 JSON without NaN/Infinity, and no string
  may hold a NUL character or a lone surrogate (PostgreSQL cannot store either: they used to be 500s).
* ``StrictInput``: a serializer that refuses fields it does not know (``E_VALIDATION`` naming them)
  instead of silently ignoring them — a misspelt optional field must not pass unnoticed.
* ``require_no_body``: for operations that take no body, anything but nothing (or ``{}``) is refused.
* ``MAX_ID``: ids in paths and bodies fit a PostgreSQL bigint.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import exceptions, parsers, serializers

from .errors import ValidationFailed

MAX_ID = 2**63 - 1
MAX_INT32 = 2**31 - 1
MAX_DEPTH = 32


def unstorable_text(value: Any, path: str = "", depth: int = 0) -> str | None:
    """The path of the first string (or key) PostgreSQL cannot store, or of a too deeply nested value."""
    if depth > MAX_DEPTH:
        return path or "(body)"
    if isinstance(value, str):
        if "\x00" in value:
            return path or "(body)"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "(body)"
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if (problem := unstorable_text(key, where, depth + 1)) or (
                    problem := unstorable_text(item, where, depth + 1)):
                return problem
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            if problem := unstorable_text(item, f"{path}[{index}]", depth + 1):
                return problem
    return None


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def parse_json_body(raw: bytes) -> Any:
    """Strict JSON: ValueError with a reason on anything the API would not store faithfully."""
    text = raw.decode("utf-8")  # UnicodeDecodeError is a ValueError
    data = json.loads(text, parse_constant=_refuse_constant)
    if (where := unstorable_text(data)) is not None:
        where = json.dumps(where)[1:-1][:200]  # escaped: the message itself must be storable (idempotency claims)
        raise ValueError(f"{where}: text may not contain NUL characters or lone surrogates, nor nest deeper "
                         f"than {MAX_DEPTH} levels")
    return data


class StrictJSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        if not raw:
            return {}
        try:
            return parse_json_body(raw)
        except ValueError as exc:
            raise exceptions.ParseError(f"JSON parse error - {exc}")


class StrictInput(serializers.Serializer):
    """A serializer that answers E_VALIDATION for fields it does not declare (nested ones too)."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            declared = {name for name, field in self.fields.items() if not field.read_only}
            unknown = sorted(str(k) for k in data if k not in declared)
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """true or false, nothing else (DRF's BooleanField also takes "yes", "on", 1, "0", …)."""

    def to_internal_value(self, data):
        if isinstance(data, bool):
            return data
        self.fail("invalid", input=data)


class StrictFloatField(serializers.FloatField):
    """A JSON number (DRF's FloatField also takes true/false and numeric strings)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


def require_no_body(request) -> None:
    """For operations without input: an empty body or ``{}`` only."""
    data = request.data  # parses (a malformed body is a ParseError → 400); an empty body is {}
    if isinstance(data, Mapping) and not data:
        return
    raise ValidationFailed("this operation takes no body (send nothing, or {})",
                           details={"fields": sorted(map(str, data)) if isinstance(data, Mapping) else []})


def body_too_large(request) -> bool:
    """Content-Length above DATA_UPLOAD_MAX_MEMORY_SIZE (checked before any view reads the body)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return False
    return limit is not None and length > limit

"""``<id:name>`` in URL patterns: a database id, at most 18 digits, so it always fits a PostgreSQL bigint.

With Django's ``<int:…>`` a path like ``/orders/99999999999999999999`` reached the database and failed
there ("bigint out of range", a 500); with ``<id:…>`` it does not resolve at all (404 E_NOT_FOUND).
"""

from __future__ import annotations

from django.urls.converters import IntConverter, register_converter


class IdConverter(IntConverter):
    regex = "[0-9]{1,18}"


def register() -> None:
    register_converter(IdConverter, "id")

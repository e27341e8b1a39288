from __future__ import annotations

import json

from django import template
from django.urls import reverse

register = template.Library()


@register.filter
def duration(seconds) -> str:
    """Seconds as the two largest units: "2d 3h", "14m 5s"."""
    if seconds is None:
        return ""
    seconds = max(0, int(seconds))  # a clock a moment behind the database never shows a negative age
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return " ".join(parts)


@register.filter
def pretty_json(value) -> str:
    return json.dumps(value, indent=1, sort_keys=True, default=str)


@register.simple_tag
def detail_link(label: str, pk) -> str:
    return reverse("console:detail", args=[label, pk])


@register.filter
def result_class(result: str) -> str:
    return {
        "applied": "ok",
        "already_applied": "ok",
        "needs_review": "warn",
        "conflict": "bad",
        "stale": "muted",
        "illegal": "bad",
    }.get(str(result), "muted")


@register.simple_tag
def console_role(user) -> str:
    from ops_console.roles import can_read, is_operator

    if is_operator(user):
        return "operator"
    return "support (read-only)" if can_read(user) else "no console role"

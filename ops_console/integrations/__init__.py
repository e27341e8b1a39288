"""Console registrations for the apps that have landed (payments, printing, orders).

They live here, not in the apps, only because the console landed after them; each module uses the
app's public services and selectors, and can move to ``<app>/console.py`` unchanged.
"""

from __future__ import annotations

from django.apps import apps


def load() -> None:
    if apps.is_installed("payments"):
        from . import payments  # noqa: F401
    if apps.is_installed("printing"):
        from . import printing  # noqa: F401
    if apps.is_installed("orders"):
        from . import orders  # noqa: F401

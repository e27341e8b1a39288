"""Switches the bench flips around a case to measure a variant of the product in the same run."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def enqueue_on_commit(enabled: bool):
    """Toggle the after-commit broker push (read by workflow.outbox at every commit)."""
    from django.conf import settings

    before = settings.OUTBOX_ENQUEUE_ON_COMMIT
    settings.OUTBOX_ENQUEUE_ON_COMMIT = enabled
    try:
        yield
    finally:
        settings.OUTBOX_ENQUEUE_ON_COMMIT = before

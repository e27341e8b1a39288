"""Switches the bench flips around a case to measure a variant of the product in the same run.

(The kernel diff the bench proposed and measured here — unlocked replays, one identity lookup, outbox
INSERT … RETURNING, a cached history manager — has been applied to workflow/kernel.py.)
"""

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

"""The one clock every machine reads, so tests can move time instead of sleeping.

``travel`` shifts this process's clock; it never touches the database's ``now()``, which is why the
kernel and the sweeps pass explicit timestamps instead of relying on SQL ``now()``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.utils import timezone

_lock = threading.Lock()
_offset = timedelta(0)
_frozen: datetime | None = None


def now() -> datetime:
    return (_frozen or timezone.now()) + _offset


@contextlib.contextmanager
def freeze(at: datetime | None = None) -> Iterator[datetime]:
    """Stop this process's clock at ``at`` (default: now) for the block; ``travel`` still moves it."""
    global _frozen
    with _lock:
        previous = _frozen
        _frozen = at or timezone.now()
    try:
        yield _frozen
    finally:
        with _lock:
            _frozen = previous


@contextlib.contextmanager
def travel(delta: timedelta | float) -> Iterator[None]:
    """Run the block with the clock moved forward by ``delta`` (seconds or a timedelta)."""
    global _offset
    if not isinstance(delta, timedelta):
        delta = timedelta(seconds=delta)
    with _lock:
        previous = _offset
        _offset = previous + delta
    try:
        yield
    finally:
        with _lock:
            _offset = previous

"""Delivery of outbox items: handlers per effect type, claims under row locks, backoff, dead letters.

An item is claimed with ``SELECT … FOR UPDATE SKIP LOCKED`` and its row lock is held while the
handler runs, inside the same transaction that records the attempt. Consequences:

* two workers never run the same item at once (the second skips the locked row);
* a worker killed mid-handler drops its connection, PostgreSQL releases the lock, the transaction
  rolls back, and the item is still due: the periodic sweep claims it again;
* whatever the handler writes locally (e.g. ``apply`` of the provider's answer) commits atomically
  with the item's ``delivered`` transition, or not at all.

The outside world may still have acted before a crash; that is why handlers pass ``item.effect_key``
as their idempotency key.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import random
import socket
import threading
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from . import clock
from .models import OutboxAttempt, OutboxItem

logger = logging.getLogger(__name__)

OUTBOX_ACTOR = "system:outbox"
DUE_STATES = (OutboxItem.State.PENDING, OutboxItem.State.RETRY_SCHEDULED)


class RetryableEffectError(Exception):
    """The effect may succeed if tried again later (timeouts, 5xx, connection errors)."""


class PermanentEffectError(Exception):
    """Trying again cannot help (4xx validation, missing handler): the item goes straight to dead."""


Handler = Callable[[OutboxItem], "dict[str, Any] | None"]


@dataclasses.dataclass(frozen=True)
class EffectConfig:
    effect_type: str
    handler: Handler | None
    max_attempts: int = 8
    base_delay_seconds: float = 2.0
    max_delay_seconds: float = 600.0


_registry: dict[str, EffectConfig] = {}


def effect_handler(effect_type: str, *, max_attempts: int = 8, base_delay_seconds: float = 2.0,
                   max_delay_seconds: float = 600.0, replace: bool = False) -> Callable[[Handler], Handler]:
    """Register the handler of one effect type (one handler per type; ``replace`` is for tests)."""

    def register(fn: Handler) -> Handler:
        existing = _registry.get(effect_type)
        if (existing is not None and not replace and existing.handler is not fn
                and existing.handler.__qualname__ != fn.__qualname__):
            raise ValueError(f"effect type {effect_type!r} already has a handler")
        _registry[effect_type] = EffectConfig(effect_type, fn, max_attempts, base_delay_seconds, max_delay_seconds)
        return fn

    return register


def effect_config(effect_type: str) -> EffectConfig:
    return _registry.get(effect_type) or EffectConfig(effect_type, None)


def registered_effect_types() -> list[str]:
    return sorted(_registry)


def backoff_delay(attempt: int, config: EffectConfig, rng: Callable[[], float] = random.random) -> float:
    """Exponential backoff with jitter: base·2^(n-1), capped, scaled by a random factor in [0.5, 1)."""
    raw = min(config.max_delay_seconds, config.base_delay_seconds * (2 ** max(0, attempt - 1)))
    return raw * (0.5 + rng() / 2)


# --- enqueueing ----------------------------------------------------------------------------------
def enqueue_after_commit(item_ids: list[int]) -> None:
    """Wake a worker once the promise is committed. Losing this message loses no work: the sweep finds it."""
    if not getattr(settings, "OUTBOX_ENQUEUE_ON_COMMIT", True) or not item_ids:
        return
    if getattr(settings, "OUTBOX_PUBLISH_IN_BACKGROUND", True):
        transaction.on_commit(lambda: _publisher.submit(item_ids))
    else:
        transaction.on_commit(lambda: _publish(item_ids))


def _publish(item_ids: list[int]) -> None:
    from .tasks import deliver_outbox_item

    for item_id in item_ids:
        try:
            deliver_outbox_item.delay(item_id)
        except Exception:  # noqa: BLE001 - the broker being down must not fail the committed command
            logger.warning("could not enqueue outbox item %s; the sweep will deliver it", item_id, exc_info=True)


class _BackgroundPublisher:
    """Publishes wake-ups from one daemon thread per process, off the command's path.

    The bench measured the synchronous publish as the largest single cost of a write (writes 2.7×
    faster without it). A wake-up lost here (the process dies first) loses no work: the item is
    committed and the periodic sweep delivers it. The thread is (re)started lazily per process, so a
    forking server (gunicorn, Celery prefork) gets its own after the fork.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._queue: queue.SimpleQueue[list[int]] = queue.SimpleQueue()
        self._idle = threading.Event()
        self._idle.set()

    def submit(self, item_ids: list[int]) -> None:
        self._ensure_thread()
        self._idle.clear()
        self._queue.put(list(item_ids))

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """For tests and shutdown hooks: block until every submitted wake-up was handed to the broker."""
        return self._idle.wait(timeout)

    def _ensure_thread(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            self._queue = queue.SimpleQueue()  # after a fork the parent's queue and thread are not ours
            threading.Thread(target=self._run, name="outbox-publisher", daemon=True).start()
            self._pid = os.getpid()

    def _run(self) -> None:
        while True:
            item_ids = self._queue.get()
            _publish(item_ids)
            if self._queue.empty():
                self._idle.set()


_publisher = _BackgroundPublisher()


# --- delivery ------------------------------------------------------------------------------------
def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def deliver_one(item_id: int | None = None) -> str | None:
    """Claim one due item (that one, or the oldest due) and deliver it. Returns the event applied to
    the item (``delivered``/``attempt_failed``/``retries_exhausted``) or None when nothing was claimable."""
    from .kernel import apply

    now = clock.now()
    with transaction.atomic():
        claim = OutboxItem.objects.select_for_update(skip_locked=True).filter(
            state__in=DUE_STATES, next_attempt_at__lte=now)
        if item_id is not None:
            claim = claim.filter(pk=item_id)
        item = claim.order_by("next_attempt_at", "id").first()
        if item is None:
            return None
        attempt = item.attempts + 1
        config = effect_config(item.effect_type)
        started = clock.now()
        result: Any = None
        error = ""
        retryable = True
        try:
            with transaction.atomic():  # a failing handler's own writes are rolled back
                if config.handler is None:
                    raise PermanentEffectError(f"no handler registered for effect type {item.effect_type!r}")
                result = config.handler(item)
        except PermanentEffectError as exc:
            error, retryable = _describe(exc), False
        except Exception as exc:  # noqa: BLE001 - any other failure is worth another try
            error = _describe(exc)
        finished = clock.now()
        OutboxAttempt.objects.create(item=item, number=attempt, started_at=started, finished_at=finished,
                                     succeeded=not error, retryable=retryable, error=error, worker=_worker_name())
        identity = f"attempt:{attempt}"
        if not error:
            event, payload = "delivered", {"attempt": attempt, "result": _jsonable(result)}
        elif retryable and attempt < item.max_attempts:
            next_at = finished + timedelta(seconds=backoff_delay(attempt, config))
            event, payload = "attempt_failed", {"attempt": attempt, "error": error,
                                                "next_attempt_at": next_at.isoformat()}
        else:
            event, payload = "retries_exhausted", {"attempt": attempt, "error": error, "retryable": retryable}
        apply(item, event, identity, payload, actor=OUTBOX_ACTOR)
        return event


def _describe(exc: BaseException) -> str:
    text = f"{exc.__class__.__name__}: {exc}"
    if not isinstance(exc, RetryableEffectError | PermanentEffectError):
        text += "\n" + "".join(traceback.format_exception(exc)[-3:])
    return text[:4000]


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, dict | list | str | int | float | bool):
        return value
    return str(value)


def sweep(*, limit: int = 1000, time_budget_seconds: float = 20.0) -> int:
    """Deliver due items until none is claimable, ``limit`` is reached or the time budget is spent."""
    done = 0
    deadline = time.monotonic() + time_budget_seconds
    while done < limit and time.monotonic() < deadline:
        if deliver_one() is None:
            break
        done += 1
    return done


# --- operator repair -----------------------------------------------------------------------------
def outbox_requeue(*, item_id: int, actor: str, reason: str, dry_run: bool = False):
    """Give a dead item a fresh budget of attempts. A repair: needs an actor and a reason."""
    from .kernel import apply

    item = OutboxItem.objects.get(pk=item_id)
    return apply(item, "requeue", f"requeue:after-attempt:{item.attempts}", {"extra_attempts": 0},
                 actor=actor, reason=reason, dry_run=dry_run)


def outbox_requeue_dead(*, actor: str, reason: str, effect_type: str | None = None,
                        dry_run: bool = False) -> list:
    """Bulk requeue of dead items, one reason for all; ``dry_run`` previews the outcomes."""
    items = OutboxItem.objects.filter(state=OutboxItem.State.DEAD)
    if effect_type:
        items = items.filter(effect_type=effect_type)
    return [outbox_requeue(item_id=pk, actor=actor, reason=reason, dry_run=dry_run)
            for pk in items.order_by("id").values_list("pk", flat=True)]

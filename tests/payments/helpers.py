"""Small helpers for payments tests."""

from __future__ import annotations

import json

from payments.sandbox.webhooks import sign
from workflow import clock, outbox
from workflow.models import OutboxItem


def drain(limit: int = 50) -> list[str]:
    """Deliver due outbox items one by one (what a worker does), answering what happened to each."""
    events = []
    for _ in range(limit):
        event = outbox.deliver_one()
        if event is None:
            return events
        events.append(event)
    raise AssertionError("outbox never drained")


def pending_effects(effect_type: str | None = None) -> list[OutboxItem]:
    items = OutboxItem.objects.exclude(state=OutboxItem.State.DELIVERED)
    if effect_type:
        items = items.filter(effect_type=effect_type)
    return list(items.order_by("id"))


def signed(event: dict, secret: str, *, timestamp: int | None = None) -> tuple[bytes, str]:
    body = json.dumps(event).encode()
    return body, sign(body, secret, int(clock.now().timestamp()) if timestamp is None else timestamp)

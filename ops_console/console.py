"""The console's own registrations: the outbox machine (requeue a dead item through workflow.outbox)."""

from __future__ import annotations

from workflow import outbox
from workflow.models import OutboxItem

from . import registry


def _outbox_title(item: OutboxItem) -> str:
    owner = f" for {item.aggregate_type}#{item.aggregate_id}" if item.aggregate_type else ""
    return f"{item.effect_type}{owner}"


def _requeue(req: registry.RepairRequest, dry_run: bool):
    return outbox.outbox_requeue(item_id=req.aggregate.pk, actor=req.actor, reason=req.reason, dry_run=dry_run)


registry.register(
    OutboxItem,
    title=_outbox_title,
    repairs=[
        registry.Repair(
            key="requeue",
            label="Requeue this dead item",
            event_type="requeue",
            applies=lambda item: item.state == OutboxItem.State.DEAD,
            description="Gives the item a fresh budget of attempts; the worker delivers it again with the "
            "same effect key (so the outside world cannot do the work twice).",
            preview=lambda req: _requeue(req, True),
            submit=lambda req: _requeue(req, False),
        )
    ],
)

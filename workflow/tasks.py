"""Celery tasks: thin wrappers, ids in, one call out. The database rows, not the messages, are the truth."""

from celery import shared_task

from . import outbox, timers


@shared_task(name="workflow.tasks.deliver_outbox_item", acks_late=True, ignore_result=True)
def deliver_outbox_item(item_id: int) -> None:
    outbox.deliver_one(item_id)


@shared_task(name="workflow.tasks.sweep_outbox", ignore_result=True)
def sweep_outbox() -> int:
    return outbox.sweep()


@shared_task(name="workflow.tasks.sweep_timers", ignore_result=True)
def sweep_timers() -> int:
    return len(timers.fire_due())

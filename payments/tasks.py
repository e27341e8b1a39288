"""Celery tasks: thin wrappers (ids in, one service call)."""

from celery import shared_task

from .reconciliation import reconciliation_run


@shared_task(name="payments.tasks.reconcile_payments", ignore_result=True)
def reconcile_payments() -> int:
    return len(reconciliation_run().found)

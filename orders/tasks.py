"""Celery tasks: thin, one service call each. Schedule them with beat (see docs/order-transitions.md)."""

from celery import shared_task


@shared_task(name="orders.tasks.reconcile_stuck_checkouts", ignore_result=True)
def reconcile_stuck_checkouts() -> int:
    from .services.recovery import checkouts_reconcile_stuck

    return len(checkouts_reconcile_stuck())


@shared_task(name="orders.tasks.audit_invariants", ignore_result=True)
def audit_invariants() -> int:
    import logging

    from .selectors import invariant_violations

    violations = invariant_violations()
    for v in violations:
        logging.getLogger("orders.audit").error("invariant %s violated by %s#%s: %s", v.invariant,
                                                 v.aggregate_type, v.aggregate_id, v.detail)
    return len(violations)

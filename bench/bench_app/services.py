"""Writers of the bench machines: the kernel path and the hand-written (naive) path."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from workflow import kernel

from .models import BenchOrder, NaiveOrder
from .tasks import naive_effect


def bench_order_apply_event(
    *, order_id: int, event_type: str, identity: str, payload: dict[str, Any], actor: str = "system:bench"
) -> kernel.Outcome:
    return kernel.apply((BenchOrder, order_id), event_type, identity, payload, actor=actor)


def naive_order_transition(*, order_id: int, event_type: str) -> NaiveOrder:
    """What a team writes by hand: lock, call the django-fsm method, save (simple-history's post_save
    writes the history row), enqueue the side effect after commit."""
    with transaction.atomic():
        order = NaiveOrder.objects.select_for_update().get(pk=order_id)
        getattr(order, event_type)()
        order.save()
        naive_effect.delay_on_commit(order.pk, event_type)
    return order

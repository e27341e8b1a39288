"""The naive baseline's side effect: a Celery task sent with delay_on_commit (the bench never consumes it)."""

from celery import shared_task


@shared_task(name="bench.naive_effect", ignore_result=True)
def naive_effect(order_id: int, event: str) -> None:
    return None

"""Reads of payments data."""

from __future__ import annotations

from django.db.models import QuerySet

from workflow.errors import NotFound

from .models import Discrepancy, PaymentAttempt, ProviderEvent, Refund


def payment_attempt_get(*, attempt_id: int) -> PaymentAttempt:
    attempt = PaymentAttempt.objects.filter(pk=attempt_id).first()
    if attempt is None:
        raise NotFound(f"payment attempt {attempt_id} not found")
    return attempt


def refund_get(*, refund_id: int) -> Refund:
    refund = Refund.objects.filter(pk=refund_id).first()
    if refund is None:
        raise NotFound(f"refund {refund_id} not found")
    return refund


def payment_attempts_for_owner(*, owner_type: str, owner_id: str | int) -> QuerySet[PaymentAttempt]:
    return PaymentAttempt.objects.filter(owner_type=owner_type, owner_id=str(owner_id)).order_by("sequence")


def current_payment_attempt(*, owner_type: str, owner_id: str | int) -> PaymentAttempt | None:
    return (
        PaymentAttempt.objects.filter(owner_type=owner_type, owner_id=str(owner_id), is_current=True)
        .order_by("-sequence")
        .first()
    )


def provider_events_for(*, aggregate_type: str, aggregate_id: int) -> QuerySet[ProviderEvent]:
    return ProviderEvent.objects.filter(aggregate_type=aggregate_type, aggregate_id=aggregate_id).order_by(
        "id"
    )


def open_discrepancies() -> QuerySet[Discrepancy]:
    return Discrepancy.objects.filter(state=Discrepancy.State.OPEN).order_by("created_at")

"""Every row of docs/order-transitions.md, executed: given an order in ``from`` with the row's facts,
when the event arrives, then ``apply`` answers ``result``, the order is in ``to`` and the promised
work exists. The rows are parsed from the document, so the document cannot drift from the code."""

from __future__ import annotations

import pathlib
import re
import uuid

import pytest

from orders.models import Order
from workflow import kernel
from workflow.models import OutboxItem, Timer

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "order-transitions.md"
TOTAL = 5000
HIGH = 200_000
ROW = re.compile(r"^\|\s*(\d+)\s*\|(.+)\|\s*$")


def rows():
    for line in DOC.read_text().splitlines():
        m = ROW.match(line)
        if not m:
            continue
        cells = [c.strip() for c in m.group(2).split("|")]
        if len(cells) != 6:
            continue
        number = int(m.group(1))
        from_state, event, given, result, to_state, promises = cells
        tokens = set() if given == "—" else {t.strip() for t in given.split(",")}
        effects = [] if promises == "—" else [p.strip() for p in promises.split(",")]
        yield pytest.param(from_state, event, tokens, result, to_state, effects, id=f"row{number}:{from_state}:{event}")


ALL_ROWS = list(rows())
KNOWN_TOKENS = {"current attempt", "old attempt", "amount differs", "policy manual_review", "high value",
                "capture recorded", "queries exhausted", "current refund", "old refund", "refund amount differs",
                "replayed", "decision refund", "decision cancel", "new attempt"}


def test_the_document_has_every_row():
    assert len(ALL_ROWS) >= 45


def build(state: str, tokens: set[str]) -> Order:
    total = HIGH if "high value" in tokens else TOTAL
    fields = {"currency": "usd", "total_amount": total, "checkout_key": f"row:{uuid.uuid4()}"}
    if state != Order.State.INVENTORY_RESERVED:
        fields.update(current_attempt_ref="pay-7", current_provider_ref="pi_7", attempt_count=1)
    if "capture recorded" in tokens or state in (Order.State.PAID, Order.State.FULFILLMENT_PENDING,
                                                 Order.State.SHIPPED, Order.State.DELIVERED,
                                                 Order.State.REFUND_PENDING):
        fields.update(capture_ref="cap-7", captured_amount=total, captured_attempt_ref="pay-7")
    if state == Order.State.REFUND_PENDING:
        fields.update(refund_key="refund:cap-7", refund_round=1)
    if "queries exhausted" in tokens:
        fields.update(cancellation_queries=5)
    return kernel.create(Order, actor="test", state=state, **fields)


def payload(event: str, order: Order, tokens: set[str]) -> dict:
    amount = order.total_amount + (1 if "amount differs" in tokens else 0)
    attempt = "pay-6" if "old attempt" in tokens else order.current_attempt_ref
    if event == "payment_captured":
        return {"attempt_ref": attempt, "amount": amount, "currency": "usd",
                "capture_ref": "cap-7" if "capture recorded" in tokens else "cap-new"}
    if event == "payment_started":
        return {"attempt_ref": "pay-8", "amount": amount, "currency": "usd"}
    if event in ("payment_failed", "payment_voided"):
        return {"attempt_ref": attempt}
    if event == "refund_succeeded":
        return {"refund_key": "refund:other" if "old refund" in tokens else order.refund_key,
                "amount": order.captured_amount + (1 if "refund amount differs" in tokens else 0)}
    if event == "refund_failed":
        return {"refund_key": order.refund_key, "error": "card closed"}
    if event == "resolve":
        return {"decision": "refund" if "decision refund" in tokens else "cancel"}
    if event == "shipped":
        return {"tracking_ref": "TRK-1"}
    return {}


@pytest.mark.django_db
@pytest.mark.parametrize(("from_state", "event", "tokens", "result", "to_state", "promises"), ALL_ROWS)
def test_row(settings, from_state, event, tokens, result, to_state, promises):
    assert tokens <= KNOWN_TOKENS, f"unknown 'given' vocabulary: {tokens - KNOWN_TOKENS}"
    if "policy manual_review" in tokens:
        settings.ORDERS_CAPTURE_DURING_CANCELLATION = "manual_review"
    order = build(from_state, tokens)
    body = payload(event, order, tokens)
    if "replayed" in tokens:
        kernel.apply(order, event, "row-event", body, actor="operator:test", reason="row test")
    items_before = set(OutboxItem.objects.values_list("pk", flat=True))

    outcome = kernel.apply(order, event, "row-event", body, actor="operator:test", reason="row test")

    assert (outcome.result, outcome.state) == (result, to_state), outcome
    order.refresh_from_db()
    assert order.state == to_state
    new_effects = set(OutboxItem.objects.filter(aggregate_type="orders.order", aggregate_id=order.pk)
                      .exclude(pk__in=items_before).values_list("effect_type", flat=True))
    timers = set(Timer.objects.filter(aggregate_type="orders.order", aggregate_id=order.pk,
                                      status=Timer.Status.SCHEDULED).values_list("timer_type", flat=True))
    expected_effects = {p for p in promises if not p.startswith("timer:")}
    expected_timers = {p.removeprefix("timer:") for p in promises if p.startswith("timer:")}
    assert new_effects == expected_effects
    assert expected_timers <= timers

"""The landed apps in the console: a print job whose outcome is unknown is found on "did it print?"
and settled by an operator; a failed refund is listed as retries exhausted and retried."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from ops_console.selectors import Classification, WaitingFilter, waiting_list
from payments.models import Refund
from printing.models import PrintJob
from printing.services import station_create
from tests.payments.samples import build_refund
from workflow import clock, kernel, timers
from workflow.models import Transition

pytestmark = pytest.mark.django_db


def unknown_print_job() -> PrintJob:
    """A job the station took to ``printing`` and then went silent about: the kernel's timer ends it in unknown."""
    station, _ = station_create(name="front-desk")
    now = clock.now()
    job = kernel.create(
        PrintJob,
        actor="test",
        state="printing",
        station=station,
        title="invoice A-1842",
        copies=1,
        content_type="text",
        content=b"hi\n",
        content_size=3,
        content_sha256="0" * 64,
        expires_in_seconds=3600,
        expires_at=now + timedelta(hours=1),
        lease_generation=1,
        lease_token="lease-1",
        report_deadline=now + timedelta(seconds=600),
        business_object_type="orders.order",
        business_object_id="A-1842",
    )
    with clock.travel(601):
        timers.fire_due()
    job.refresh_from_db()
    assert job.state == "unknown"
    return job


def test_did_it_print_finds_an_unknown_job_by_business_object(support_client):
    job = unknown_print_job()
    html = support_client.get(reverse("console:did-it-print") + "?q=A-1842").content.decode()
    assert f'data-id="{job.pk}"' in html
    assert "evidence conflicts" in html and "front-desk" in html and "disconnected" in html
    assert "silence_deadline_passed" in html  # the transition that ended in unknown, with its time
    assert "invoice A-1842" in html


def test_unknown_print_job_is_waiting_for_an_operator_and_is_settled_with_a_reason(operator_client):
    job = unknown_print_job()
    rows = waiting_list(WaitingFilter(machine="printing.printjob", aggregate_id=job.pk)).rows
    assert rows and rows[0].classification == Classification.EVIDENCE_CONFLICTS
    url = reverse("console:repair", args=["printing.printjob", job.pk, "settle-unknown"])
    preview = operator_client.post(
        url,
        {
            "settle-unknown-reason": "checked the tray: page is there",
            "settle-unknown-outcome": "completed",
            "action": "preview",
        },
    )
    assert "<b>completed</b>" in preview.content.decode()
    job.refresh_from_db()
    assert job.state == "unknown"
    operator_client.post(
        url,
        {
            "settle-unknown-reason": "checked the tray: page is there",
            "settle-unknown-outcome": "completed",
            "action": "submit",
            "previewed_version": str(job.state_version),
        },
    )
    job.refresh_from_db()
    assert job.state == "completed" and job.settled_by == "operator"
    record = Transition.objects.get(
        aggregate_type="printing.printjob", aggregate_id=job.pk, event_type="operator_settled"
    )
    assert (record.actor, record.reason) == ("user:olga-operator", "checked the tray: page is there")


def test_failed_refund_is_retries_exhausted_and_an_operator_retries_it(operator_client):
    refund = build_refund(Refund.State.FAILED)
    rows = waiting_list(WaitingFilter(machine="payments.refund", aggregate_id=refund.pk)).rows
    assert rows[0].classification == Classification.RETRIES_EXHAUSTED
    page = operator_client.get(reverse("console:detail", args=["payments.refund", refund.pk])).content.decode()
    assert "/repair/retry-refund/" in page and "Provider events (verbatim)" in page
    url = reverse("console:repair", args=["payments.refund", refund.pk, "retry-refund"])
    operator_client.post(
        url,
        {
            "retry-refund-reason": "card issuer fixed",
            "action": "submit",
            "previewed_version": str(refund.state_version),
        },
    )
    refund.refresh_from_db()
    assert refund.state == "requested" and refund.tries == 2
    assert (
        Transition.objects.get(aggregate_type="payments.refund", aggregate_id=refund.pk, event_type="retry").actor
        == "user:olga-operator"
    )


def test_support_cannot_settle_or_retry(support_client):
    job = unknown_print_job()
    refund = build_refund(Refund.State.FAILED)
    for url, data in [
        (
            reverse("console:repair", args=["printing.printjob", job.pk, "settle-unknown"]),
            {
                "settle-unknown-reason": "x",
                "settle-unknown-outcome": "failed",
                "action": "submit",
                "previewed_version": str(job.state_version),
            },
        ),
        (
            reverse("console:repair", args=["payments.refund", refund.pk, "retry-refund"]),
            {"retry-refund-reason": "x", "action": "submit", "previewed_version": str(refund.state_version)},
        ),
    ]:
        assert support_client.post(url, data).status_code == 403
    job.refresh_from_db()
    refund.refresh_from_db()
    assert (job.state, refund.state) == ("unknown", "failed")


def order_with_dead_refund():
    """An order in refund_pending whose refund promise died after its automatic retries."""
    from tests.orders.samples import build_order
    from workflow import outbox
    from workflow.models import OutboxItem

    order = build_order("refund_pending")
    item = kernel.create(
        OutboxItem,
        actor="test",
        effect_type="console_test.provider_down",
        effect_key=order.refund_key,
        aggregate_type="orders.order",
        aggregate_id=order.pk,
        max_attempts=1,
    )
    assert outbox.deliver_one(item.pk) == "retries_exhausted"
    return order, OutboxItem.objects.get(pk=item.pk)


def test_order_with_a_dead_refund_is_retried_from_the_order_page(operator_client):
    order, item = order_with_dead_refund()
    rows = waiting_list(WaitingFilter(machine="orders.order", aggregate_id=order.pk)).rows
    assert rows[0].classification == Classification.RETRIES_EXHAUSTED and "503" in rows[0].last_error
    page = operator_client.get(reverse("console:detail", args=["orders.order", order.pk])).content.decode()
    assert "/repair/retry-refund/" in page and "Reservations, payment attempts and refunds" in page
    url = reverse("console:repair", args=["orders.order", order.pk, "retry-refund"])
    preview = operator_client.post(url, {"retry-refund-reason": "provider back", "action": "preview"})
    assert "<b>pending</b>" in preview.content.decode()
    operator_client.post(
        url, {"retry-refund-reason": "provider back", "action": "submit", "previewed_version": str(order.state_version)}
    )
    item.refresh_from_db()
    assert item.state == "pending"
    page = operator_client.get(reverse("console:detail", args=["orders.order", order.pk])).content.decode()
    assert "by user:olga-operator" in page and "provider back" in page


def test_order_whose_refund_failed_at_the_provider_is_retries_exhausted():
    from tests.orders.samples import build_order

    order = build_order("refund_pending")
    assert waiting_list(WaitingFilter(machine="orders.order", aggregate_id=order.pk)).rows[0].classification == (
        Classification.WAITING_NORMALLY
    )
    outcome = kernel.apply(
        order,
        "refund_failed",
        "refund:failed:1",
        {"refund_key": order.refund_key, "error": "card closed"},
        actor="payments",
    )
    assert outcome.result == "applied"
    row = waiting_list(WaitingFilter(machine="orders.order", aggregate_id=order.pk)).rows[0]
    assert row.classification == Classification.RETRIES_EXHAUSTED

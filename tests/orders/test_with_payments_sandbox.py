"""Orders with the payments app and the sandbox provider over real HTTP (no in-process double).

The outbox is drained the way workers do (deliver_one/sweep); provider facts reach the order through
payments' attempt/refund machines and the orders hook — or, in the webhook test, through the signed
webhook inbox served by a live server.
"""

from __future__ import annotations

import pytest

from orders.models import Order, Product, Reservation
from orders.services import order_cancel
from payments.models import PaymentAttempt, Refund
from tests.orders.conftest import drain
from workflow import clock, outbox
from workflow.models import OutboxItem, Transition
from workflow.selectors import history_mismatches

pytestmark = pytest.mark.django_db


@pytest.fixture
def payments_port(settings, sandbox):
    settings.ORDERS_PAYMENT_PORT = "orders.payments_adapter.PaymentsAppPort"
    return sandbox


def stock() -> int:
    return Product.objects.get(sku="MUG-1").stock_on_hand


def test_checkout_authorizes_captures_and_pays_over_http(payments_port, place_order):
    order = place_order(2)
    attempt = PaymentAttempt.objects.get(pk=order.current_attempt_id)
    assert order.current_attempt_ref == f"pay-{attempt.pk}" and attempt.state == "requested"

    drain()  # create+authorize at the sandbox → capture on authorization → captured → order paid

    order = Order.objects.get(pk=order.pk)
    attempt.refresh_from_db()
    assert (attempt.state, order.state) == ("captured", "paid")
    assert order.capture_ref == attempt.provider_intent_id and order.captured_amount == 5000
    assert set(Reservation.objects.filter(order_id=order.pk).values_list("state", flat=True)) == {"committed"}
    assert [i["status"] for i in payments_port.ledger()["payment_intents"]] == ["succeeded"]


def test_cancel_while_capture_wins_at_the_provider_refunds_once(payments_port, place_order):
    """The seed's race for real: the void reaches the provider just after a capture landed there."""
    order = place_order(2)
    order_cancel(order_id=order.pk, actor="buyer", reason="changed my mind")
    payments_port.fault("payment_intent.cancel", "capture_wins")
    void = OutboxItem.objects.get(effect_type="orders.request_void")

    outbox.deliver_one(void.pk)  # orders asks payments to void …
    drain()  # … payments' cancel call finds the money captured; the order refunds; the refund settles

    order = Order.objects.get(pk=order.pk)
    assert order.state == "cancelled"
    refund = Refund.objects.get()
    assert refund.state == "succeeded" and refund.refund_key == order.refund_key == f"refund:{order.capture_ref}"
    assert len(payments_port.ledger()["refunds"]) == 1
    assert stock() == 20
    path = list(Transition.objects.filter(aggregate_type="orders.order", aggregate_id=order.pk,
                                          result="applied").order_by("to_version").values_list("to_state", flat=True))
    assert path == ["inventory_reserved", "payment_pending", "cancellation_pending", "refund_pending", "cancelled"]
    assert history_mismatches(Order) == []


def test_cancel_before_capture_voids_at_the_provider(payments_port, place_order):
    order = place_order(1)
    order_cancel(order_id=order.pk, actor="buyer")
    outbox.deliver_one(OutboxItem.objects.get(effect_type="orders.request_void").pk)

    drain()

    order = Order.objects.get(pk=order.pk)
    attempt = PaymentAttempt.objects.get(pk=order.current_attempt_id)
    assert (order.state, attempt.state) == ("cancelled", "voided")
    assert not Refund.objects.exists() and stock() == 20


def test_refund_done_but_answer_lost_is_not_repeated(payments_port, place_order):
    order = place_order(1)
    drain()
    payments_port.fault("refund.create", "drop_response")  # the provider refunds; the worker never hears

    order_cancel(order_id=order.pk, actor="buyer")
    drain()  # the refund call's answer is lost: payments records it unknown and promises a query
    assert Refund.objects.get().state == "unknown"
    with clock.travel(60):
        drain()  # the query finds the refund at the provider instead of refunding again

    order = Order.objects.get(pk=order.pk)
    assert order.state == "cancelled"
    assert len(payments_port.ledger()["refunds"]) == 1
    assert Refund.objects.get().state == "succeeded"


@pytest.mark.django_db(transaction=True)
def test_capture_webhook_replayed_is_already_applied(payments_port, place_order, live_server, api_client):
    payments_port.configure(webhook_url=f"{live_server.url}/api/v1/webhooks/payments/sandbox")
    order = place_order(1)
    drain()
    payments_port.wait_webhooks_idle()
    order = Order.objects.get(pk=order.pk)
    assert order.state == "paid"
    succeeded = payments_port.events("payment_intent.succeeded")
    assert len(succeeded) == 1
    before = Transition.objects.filter(aggregate_type="orders.order", aggregate_id=order.pk).count()

    payments_port.deliver_again(succeeded[0]["id"])
    payments_port.wait_webhooks_idle()

    order = Order.objects.get(pk=order.pk)
    assert order.state == "paid"
    assert Transition.objects.filter(aggregate_type="orders.order", aggregate_id=order.pk).count() == before


@pytest.mark.django_db(transaction=True)
def test_operator_retries_a_failed_refund_through_payments(payments_port, place_order, live_server):
    """The refund fails at the provider (signed webhook); the order keeps waiting in refund_pending
    with operators flagged; an operator retries it with actor and reason; its success cancels the order."""
    from orders.services import order_retry_refund
    from workflow.errors import ValidationFailed

    payments_port.configure(webhook_url=f"{live_server.url}/api/v1/webhooks/payments/sandbox",
                            refund_initial_status="pending")
    order = place_order(1)
    drain()
    order_cancel(order_id=order.pk, actor="buyer")
    drain()
    payments_port.wait_webhooks_idle()
    refund = Refund.objects.get()
    assert refund.state == "pending"

    payments_port.settle_refund(refund.provider_refund_id, "failed")
    payments_port.wait_webhooks_idle()

    order = Order.objects.get(pk=order.pk)
    assert (order.state, Refund.objects.get().state) == ("refund_pending", "failed")
    assert "failed" in order.attention

    with pytest.raises(ValidationFailed):
        order_retry_refund(order_id=order.pk, actor="operator:ana", reason="")
    payments_port.configure(refund_initial_status="succeeded")
    retried = order_retry_refund(order_id=order.pk, actor="operator:ana", reason="card reissued, ticket 77")
    drain()
    payments_port.wait_webhooks_idle()

    assert retried.result == "applied"
    order = Order.objects.get(pk=order.pk)
    assert (order.state, Refund.objects.get().state) == ("cancelled", "succeeded")
    row = Transition.objects.get(pk=retried.transition_id)
    assert (row.event_type, row.actor, row.reason) == ("retry", "operator:ana", "card reissued, ticket 77")
    statuses = sorted(r["status"] for r in payments_port.ledger()["refunds"])
    assert statuses == ["failed", "succeeded"]


def test_audit_checks_the_capture_at_payments(payments_port, place_order):
    from orders.selectors import invariant_violations

    order = place_order(1)
    drain()
    assert invariant_violations() == []
    # plant a disagreement: the order says paid, payments' attempt row says authorized
    PaymentAttempt.objects.filter(pk=order.current_attempt_id).update(state="authorized")

    found = [(v.invariant, v.aggregate_id) for v in invariant_violations()]

    assert ("paid_implies_capture", order.pk) in found

"""The seed's "Put the model under pressure" list and order 1842's trace, over the REAL sandbox provider.

Same scenarios as tests/orders/test_order_protocol.py (which proves the order protocol against the
in-process double), here end to end: the payments app's attempt and refund machines, the Stripe adapter
talking HTTP to the sandbox subprocess, outbox items delivered the way workers do (``deliver_one``),
provider webhooks signed with the sandbox's secret and posted to the inbox, races and lost answers made
with the sandbox's fault controls, and money counted in the sandbox's own ledger.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
import requests
from django.db import connection
from rest_framework.test import APIClient

from orders.models import Order, Product, Reservation
from orders.payments_adapter import PaymentsAppPort
from orders.services import order_cancel, order_retry_refund, order_start_payment_attempt
from orders.services.reservations import reservations_hold
from payments.models import Discrepancy, PaymentAttempt, ProviderEvent, Refund
from payments.reconciliation import discrepancy_repair, reconciliation_run
from tests.orders.conftest import drain
from tests.payments.helpers import signed
from tests.sandbox_provider import REPO_ROOT
from workflow import clock, kernel, outbox, timers
from workflow.errors import ValidationFailed
from workflow.models import OutboxItem, Transition
from workflow.selectors import history_mismatches

pytestmark = pytest.mark.django_db
WEBHOOK_URL = "/api/v1/webhooks/payments/sandbox"


@pytest.fixture
def payments_port(settings, sandbox):
    settings.ORDERS_PAYMENT_PORT = "orders.payments_adapter.PaymentsAppPort"
    return sandbox


# --- small helpers ---------------------------------------------------------------------------------
def stock() -> int:
    return Product.objects.get(sku="MUG-1").stock_on_hand


def money(sandbox) -> tuple[int, int]:
    """(captures, refunds) as the provider's own ledger counts them."""
    ledger = sandbox.ledger()
    captures = [c for c in ledger["charges"] if c["captured"]]
    return len(captures), len(ledger["refunds"])


def item(effect_type: str, **filters) -> OutboxItem:
    return OutboxItem.objects.get(effect_type=effect_type, **filters)


def attempt_item(effect_type: str, attempt_id: int) -> OutboxItem:
    return item(effect_type, aggregate_type="payments.paymentattempt", aggregate_id=attempt_id)


def deliver(item_: OutboxItem) -> str | None:
    return outbox.deliver_one(item_.pk)


def drain_except(*held: OutboxItem) -> list[str]:
    """Deliver every due item but the held ones (a worker that has not reached them yet)."""
    events, held_ids = [], {h.pk for h in held}
    while True:
        due = (OutboxItem.objects.filter(state__in=outbox.DUE_STATES, next_attempt_at__lte=clock.now())
               .exclude(pk__in=held_ids).order_by("next_attempt_at", "id").first())
        if due is None:
            return events
        events.append(outbox.deliver_one(due.pk))


def order_path(order_id: int) -> list[tuple[str, int]]:
    return list(Transition.objects.filter(aggregate_type="orders.order", aggregate_id=order_id,
                                          result__in=["applied", "needs_review"]).order_by("to_version")
                .values_list("to_state", "to_version"))


def provider_event(sandbox, event_type: str, intent_id: str) -> dict:
    [event] = [e for e in sandbox.events(event_type) if e["data"]["object"]["id"] == intent_id]
    return event


def post_webhook(sandbox, event: dict) -> dict:
    """What the sandbox would send: the event signed with the webhook secret, posted to the inbox."""
    body, signature = signed(event, sandbox.webhook_secret)
    answer = APIClient().post(WEBHOOK_URL, data=body, content_type="application/json",
                              HTTP_STRIPE_SIGNATURE=signature)
    assert answer.status_code == 200, answer.content
    return answer.json()


def authorize(order: Order) -> PaymentAttempt:
    """Deliver the attempt's create call: the sandbox authorizes; orders promises the capture."""
    deliver(attempt_item("payments.create_intent", order.current_attempt_id))
    return PaymentAttempt.objects.get(pk=order.current_attempt_id)


# --- 1. cancellation and capture arrive in both orders --------------------------------------------
def test_cancel_then_capture_refunds_once_and_cancels(payments_port, place_order):
    order = place_order(2)
    attempt = authorize(order)
    assert attempt.state == "capture_pending"  # authorized; orders asked for the capture at once

    cancelled = order_cancel(order_id=order.pk, actor="buyer", reason="changed my mind")
    deliver(attempt_item("payments.capture_intent", attempt.pk))  # the capture was already on its way
    order.refresh_from_db()
    assert (cancelled.state, order.state) == ("cancellation_pending", "refund_pending")
    drain()  # the void finds the money captured; the refund keyed by the capture is made and settles

    order.refresh_from_db()
    assert order.state == "cancelled"
    assert order.refund_key == f"refund:{attempt.provider_intent_id}"
    assert item("orders.request_void", aggregate_id=order.pk).result["answer"] == "already_captured"
    assert Refund.objects.get().state == "succeeded"
    assert money(payments_port) == (1, 1)
    assert [s for s, _ in order_path(order.pk)] == ["inventory_reserved", "payment_pending",
                                                    "cancellation_pending", "refund_pending", "cancelled"]
    assert stock() == 20


def test_capture_then_cancel_refunds_once_and_cancels(payments_port, place_order):
    order = place_order(2)
    drain()  # authorized → captured at the sandbox → paid
    order.refresh_from_db()
    assert order.state == "paid"

    cancelled = order_cancel(order_id=order.pk, actor="buyer", reason="changed my mind")
    drain()

    order.refresh_from_db()
    assert (cancelled.state, order.state) == ("refund_pending", "cancelled")
    assert money(payments_port) == (1, 1)
    assert [s for s, _ in order_path(order.pk)] == ["inventory_reserved", "payment_pending", "paid",
                                                    "refund_pending", "cancelled"]
    assert set(Reservation.objects.filter(order_id=order.pk).values_list("state", flat=True)) == {"released"}
    assert stock() == 20


# --- 2. the same capture event twice --------------------------------------------------------------
def test_capture_webhook_redelivered_is_already_applied(payments_port, place_order):
    order = place_order(1)
    attempt = authorize(order)
    payments_port.fault("payment_intent.capture", "drop_response")  # captured there; our worker never hears
    deliver(attempt_item("payments.capture_intent", attempt.pk))
    assert PaymentAttempt.objects.get(pk=attempt.pk).state == "unknown"
    succeeded = provider_event(payments_port, "payment_intent.succeeded", attempt.provider_intent_id)

    first = post_webhook(payments_port, succeeded)
    counts = (Transition.objects.filter(aggregate_type="orders.order", aggregate_id=order.pk).count(),
              OutboxItem.objects.count())
    again = post_webhook(payments_port, succeeded)

    assert first["result"] == "applied"
    assert [(r["result"], r["state"]) for r in first["related"]] == [("applied", "paid")]
    assert (again["result"], again["replayed"], again["related"]) == ("already_applied", True, [])
    assert (Transition.objects.filter(aggregate_type="orders.order", aggregate_id=order.pk).count(),
            OutboxItem.objects.count()) == counts
    assert ProviderEvent.objects.filter(event_id=succeeded["id"]).count() == 1
    with clock.travel(60):
        drain()  # the query for the lost answer learns the same fact: nothing more happens
    order.refresh_from_db()
    assert order.state == "paid" and order.state_version == 3
    assert OutboxItem.objects.filter(effect_type="orders.commit_inventory").count() == 1
    assert money(payments_port) == (1, 0)


# --- 3. an old attempt reports success after a new attempt began -----------------------------------
def test_old_attempt_capture_after_new_attempt_is_stale_and_reconciled(payments_port, place_order):
    order = place_order(1)
    old = PaymentAttempt.objects.get(pk=order.current_attempt_id)
    PaymentAttempt.objects.filter(pk=old.pk).update(payment_method="pm_card_chargeDeclined")  # the buyer's card
    drain()
    order.refresh_from_db()
    old.refresh_from_db()
    assert (order.state, old.state) == ("payment_failed", "failed")
    started = order_start_payment_attempt(order_id=order.pk, idempotency_key="second-card", actor="buyer")
    order.refresh_from_db()
    assert started.state == "payment_pending" and order.current_attempt_id != old.pk

    # The buyer's old tab confirms the old intent with another card, and it is captured at the provider.
    confirmed = requests.post(f"{payments_port.url}/v1/payment_intents/{old.provider_intent_id}/confirm",
                              data={"payment_method": "pm_card_visa"},
                              headers={"Authorization": f"Bearer {payments_port.api_key}"}, timeout=10)
    assert confirmed.json()["status"] == "requires_capture", confirmed.text
    payments_port.provider().capture_intent(old.provider_intent_id, idempotency_key="dashboard-capture")
    late = post_webhook(payments_port, provider_event(payments_port, "payment_intent.succeeded",
                                                      old.provider_intent_id))

    assert late["result"] == "stale"
    assert [(r["result"], r["state"]) for r in late["related"]] == [("stale", "payment_pending")]
    order.refresh_from_db()
    assert (order.state, order.capture_ref) == ("payment_pending", "")
    kept = Transition.objects.get(aggregate_type="orders.order", aggregate_id=order.pk,
                                  event_type="payment_captured")
    assert (kept.result, kept.payload["attempt_ref"]) == ("stale", f"pay-{old.pk}")

    report = reconciliation_run(grace_seconds=0)
    assert [(d.kind, d.attempt_id, d.proposed_repair) for d in report.found] == [
        ("capture_on_abandoned_attempt", old.pk, "refund_superseded_capture")]
    repaired = discrepancy_repair(discrepancy_id=report.found[0].pk, actor="operator:ana",
                                  reason="old tab captured a superseded attempt")
    drain()
    assert repaired.repair_outcome.result == "applied"
    assert Discrepancy.objects.get().state == "repaired"
    assert [r["payment_intent"] for r in payments_port.ledger()["refunds"]] == [old.provider_intent_id]


# --- 4. a refund succeeds remotely and the worker crashes before recording delivery ---------------
def _worker_env(sandbox) -> dict[str, str]:
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings_test", "DATABASE_URL": url,
            "PAYMENT_PROVIDER": "sandbox", "STRIPE_API_BASE": sandbox.url, "STRIPE_API_KEY": sandbox.api_key,
            "STRIPE_TIMEOUT_SECONDS": "60", "PYTHONUNBUFFERED": "1"}


@pytest.mark.django_db(transaction=True)
def test_refund_made_then_worker_killed_is_retried_with_the_same_key(payments_port, place_order):
    order = place_order(1)
    drain()
    order_cancel(order_id=order.pk, actor="buyer", reason="changed my mind")
    deliver(item("orders.request_refund", aggregate_id=order.pk))  # payments promises the provider call
    create_refund = item("payments.create_refund")
    # The sandbox makes the refund and then holds its answer; meanwhile the worker process is killed.
    payments_port.fault("refund.create", "delay", seconds=30, when="after")
    worker = subprocess.Popen(
        [sys.executable, "-c", "import django; django.setup(); from workflow import outbox; "
                               f"outbox.deliver_one({create_refund.pk})"],
        cwd=REPO_ROOT, env=_worker_env(payments_port))
    try:
        payments_port.wait_for(lambda ledger: len(ledger["refunds"]) == 1, what="the refund made")
    finally:
        worker.kill()
        worker.wait()

    create_refund.refresh_from_db()
    assert (create_refund.state, create_refund.attempts) == ("pending", 0)  # nothing was recorded
    assert Refund.objects.get().state == "requested"
    deadline = time.monotonic() + 20  # the dead worker's row locks go when PostgreSQL notices it
    while (event := deliver(create_refund)) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert event == "delivered"

    create_refund.refresh_from_db()
    order.refresh_from_db()
    assert order.state == "cancelled" and Refund.objects.get().state == "succeeded"
    assert money(payments_port) == (1, 1)
    key = create_refund.payload["idempotency_key"]
    assert [k["key"] for k in payments_port.ledger()["idempotency_keys"]].count(key) == 1


# --- 5. a stale cancellation timer fires after the order is refunded -------------------------------
def test_cancellation_timer_after_refund_is_stale(payments_port, place_order):
    order = place_order(1)
    authorize(order)
    order_cancel(order_id=order.pk, actor="buyer", reason="changed my mind")
    drain()  # the capture lands first; refund_pending → refunded at the sandbox → cancelled
    order.refresh_from_db()
    assert order.state == "cancelled" and money(payments_port) == (1, 1)
    version = order.state_version

    with clock.travel(10 * 60):
        fired = {t.timer_type: t.result for t in timers.fire_due()}
        drain()

    assert fired["cancellation_timed_out"] == "stale"
    order.refresh_from_db()
    assert (order.state, order.state_version) == ("cancelled", version)
    assert not OutboxItem.objects.filter(effect_type="orders.resolve_cancellation").exists()
    assert money(payments_port) == (1, 1)


# --- 6. an operator retries an exhausted refund with an actor and a reason -------------------------
def test_operator_retries_an_exhausted_refund(payments_port, place_order):
    order = place_order(1)
    drain()
    payments_port.fault("refund.create", "error", status=500, times=None)  # the provider keeps failing
    order_cancel(order_id=order.pk, actor="buyer", reason="changed my mind")
    hours = 0
    while not OutboxItem.objects.filter(effect_type__startswith="payments.", effect_type__endswith="_refund",
                                        state="dead").exists():
        hours += 1
        assert hours < 40, "the refund's delivery never gave up"
        with clock.travel(hours * 3600):
            drain()
    dead = OutboxItem.objects.get(effect_type__endswith="_refund", state="dead")
    assert dead.attempts == dead.max_attempts
    order.refresh_from_db()
    assert order.state == "refund_pending" and money(payments_port) == (1, 0)

    with pytest.raises(ValidationFailed):
        order_retry_refund(order_id=order.pk, actor="operator:ana", reason=" ")
    payments_port._control("DELETE", "faults")
    retried = order_retry_refund(order_id=order.pk, actor="operator:ana", reason="provider outage over (INC-42)")
    with clock.travel((hours + 1) * 3600):
        drain()

    assert retried.result == "applied"
    row = Transition.objects.get(pk=retried.transition_id)
    assert (row.actor, row.reason) == ("operator:ana", "provider outage over (INC-42)")
    order.refresh_from_db()
    assert (order.state, Refund.objects.get().state) == ("cancelled", "succeeded")
    assert money(payments_port) == (1, 1)


# --- 7. two commands observe the same version; one commits ----------------------------------------
@pytest.mark.django_db(transaction=True)
def test_two_commands_on_the_same_version_commit_once(payments_port, place_order):
    order = place_order(1)
    drain()
    order.refresh_from_db()
    assert order.state == "paid"
    observed = order.state_version
    barrier = threading.Barrier(2)
    outcomes = {}

    def command(name, run):
        try:
            barrier.wait()
            outcomes[name] = run()
        finally:
            connection.close()

    threads = [
        threading.Thread(target=command, args=("cancel", lambda: order_cancel(
            order_id=order.pk, actor="buyer", reason="changed my mind"))),
        threading.Thread(target=command, args=("accept", lambda: kernel.apply(
            (Order, order.pk), "fulfillment_accepted", "wh-accept-1", {}, actor="warehouse"))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    drain()

    results = {name: o.result for name, o in outcomes.items()}
    assert sorted(results.values()) in (["applied", "illegal"], ["applied", "conflict"]), results
    committed = Transition.objects.filter(aggregate_type="orders.order", aggregate_id=order.pk,
                                          from_version=observed, result="applied")
    assert committed.count() == 1
    order.refresh_from_db()
    if results["cancel"] == "applied":
        assert order.state == "cancelled" and money(payments_port) == (1, 1)
    else:
        assert order.state == "fulfillment_pending" and money(payments_port) == (1, 0)
    assert history_mismatches(Order) == []


# --- 8. order 1842 ----------------------------------------------------------------------------------
def test_order_1842_trace_over_the_sandbox(payments_port, product):
    """pay-6 was abandoned when pay-7 started (v2). The buyer cancels (v3, void promised); evt-91 says
    pay-7 was captured → refund_pending, refund keyed by the capture; evt-91 again → already applied;
    the refund settles → cancelled; pay-6's capture → stale."""
    port = PaymentsAppPort()
    kernel.create(Order, actor="checkout", id=1842, state="inventory_reserved", currency="usd",
                  total_amount=5000, checkout_key="trace-1842",
                  lines=[{"sku": product.sku, "quantity": 2, "unit_price": 2500, "line_total": 5000}])
    reservation = reservations_hold(lines=[{"product_id": product.pk, "sku": product.sku, "quantity": 2}],
                                    cart_id=None, checkout_key="trace-1842", actor="checkout")[0]
    Reservation.objects.filter(pk=reservation.pk).update(order_id=1842)
    with connection.cursor() as cursor:  # name the attempts as the trace does: pay-6, pay-7
        cursor.execute("SELECT setval(pg_get_serial_sequence('payments_paymentattempt', 'id'), 5)")
    pay6 = port.start_attempt(order_id=1842, amount=5000, currency="usd", idempotency_key="1842:first")
    deliver(attempt_item("payments.create_intent", pay6.attempt_id))  # authorized at the sandbox
    pay7 = port.start_attempt(order_id=1842, amount=5000, currency="usd", idempotency_key="1842:second")
    assert (pay6.attempt_ref, pay7.attempt_ref) == ("pay-6", "pay-7")
    pay6_void = attempt_item("payments.cancel_intent", 6)  # pay-6 abandoned: its void is promised
    started = kernel.apply((Order, 1842), "payment_started", "attempt:pay-7:started",
                           {"attempt_ref": "pay-7", "attempt_id": 7, "amount": 5000, "currency": "usd"},
                           actor="checkout")
    assert (started.state, started.version) == ("payment_pending", 2)
    deliver(attempt_item("payments.create_intent", 7))  # authorized → orders promises the capture
    # 10:00:03 the provider captures pay-7; its answer to our worker is lost
    payments_port.fault("payment_intent.capture", "drop_response")
    deliver(attempt_item("payments.capture_intent", 7))
    pi7 = PaymentAttempt.objects.get(pk=7).provider_intent_id

    # 10:00:04 the buyer cancels
    cancel = order_cancel(order_id=1842, actor="buyer:1842", reason="changed my mind")
    assert (cancel.result, cancel.state, cancel.version) == ("applied", "cancellation_pending", 3)
    assert item("orders.request_void", aggregate_id=1842).effect_key == "void:pay-7"

    # 10:00:05 evt-91: the provider's capture webhook for pay-7
    evt91 = provider_event(payments_port, "payment_intent.succeeded", pi7)
    first = post_webhook(payments_port, evt91)
    assert [(r["result"], r["state"], r["version"]) for r in first["related"]] == [
        ("applied", "refund_pending", 4)]
    assert item("orders.request_refund", aggregate_id=1842).effect_key == f"refund:{pi7}"

    # evt-91 again
    again = post_webhook(payments_port, evt91)
    assert (again["result"], again["replayed"]) == ("already_applied", True)

    # the void worker finds pay-7 captured; the refund is made once and settles
    drain_except(pay6_void)
    order = Order.objects.get(pk=1842)
    assert (order.state, order.state_version) == ("cancelled", 5)
    assert item("orders.request_void", aggregate_id=1842).result["answer"] == "already_captured"
    assert Reservation.objects.get(pk=reservation.pk).state == "released" and stock() == 20

    # pay-6's capture: the provider captured it just before our void of the abandoned attempt arrived
    payments_port.fault("payment_intent.cancel", "capture_wins")
    deliver(pay6_void)
    pay6_capture = Transition.objects.get(aggregate_type="orders.order", aggregate_id=1842,
                                          event_type="payment_captured", payload__attempt_ref="pay-6")
    assert (pay6_capture.result, pay6_capture.to_state, pay6_capture.to_version) == ("stale", "cancelled", 5)

    assert order_path(1842) == [("inventory_reserved", 1), ("payment_pending", 2), ("cancellation_pending", 3),
                                ("refund_pending", 4), ("cancelled", 5)]
    ledger = payments_port.ledger()
    assert [r["payment_intent"] for r in ledger["refunds"]] == [pi7]
    found = {(d.kind, d.attempt_id) for d in reconciliation_run(grace_seconds=0).found}
    assert found == {("capture_on_abandoned_attempt", 6)}  # pay-6's money is proposed for a refund
    assert history_mismatches(Order) == []

"""The provider webhook inbox: signature over the raw body, verbatim storage, classification via apply."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
import requests
from rest_framework.test import APIClient

from payments import hooks
from payments.models import PaymentAttempt, ProviderEvent, Refund
from payments.sandbox.webhooks import sign
from tests.payments.helpers import signed
from workflow import clock, kernel
from workflow.models import Transition

SECRET = "whsec_current"
URL = "/api/v1/webhooks/payments/stripe"


@pytest.fixture(autouse=True)
def webhook_secrets(settings):
    settings.STRIPE_WEBHOOK_SECRETS = [SECRET]
    settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS = 300


def make_attempt(state="authorized", amount=1500, is_current=True, intent_id=None) -> PaymentAttempt:
    tag = uuid.uuid4().hex[:10]
    return kernel.create(
        PaymentAttempt,
        actor="test",
        state=state,
        owner_type="tests.order",
        owner_id=tag,
        amount=amount,
        currency="eur",
        provider_intent_id=intent_id or f"pi_{tag}",
        is_current=is_current,
    )


def intent_event(attempt, status, *, event_type=None, amount=None, event_id=None) -> dict:
    amount = attempt.amount if amount is None else amount
    event_type = (
        event_type
        or {
            "requires_capture": "payment_intent.amount_capturable_updated",
            "succeeded": "payment_intent.succeeded",
            "canceled": "payment_intent.canceled",
            "requires_payment_method": "payment_intent.payment_failed",
        }[status]
    )
    intent = {
        "id": attempt.provider_intent_id,
        "object": "payment_intent",
        "amount": amount,
        "currency": "eur",
        "status": status,
        "amount_capturable": amount if status == "requires_capture" else 0,
        "amount_received": amount if status == "succeeded" else 0,
        "created": 1,
        "metadata": {"ledgerflow_attempt": str(attempt.public_id)},
        "last_payment_error": None,
    }
    return {
        "id": event_id or f"evt_{uuid.uuid4().hex[:16]}",
        "object": "event",
        "type": event_type,
        "created": 1,
        "data": {"object": intent},
        "livemode": False,
    }


def deliver(client, event, *, secret=SECRET, timestamp=None, header=None, path=URL):
    body, signature = signed(event, secret, timestamp=timestamp)
    return client.post(
        path,
        data=body,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=header if header is not None else signature,
    )


@pytest.fixture
def client():
    return APIClient()


@pytest.mark.django_db
def test_a_valid_event_is_applied_and_stored_verbatim(client):
    attempt = make_attempt()
    event = intent_event(attempt, "succeeded")

    answer = deliver(client, event)

    assert answer.status_code == 200
    assert answer.json() | {"transition_id": None} == {
        "result": "applied",
        "state": "captured",
        "version": 2,
        "transition_id": None,
        "replayed": False,
        "detail": "",
        "event_id": event["id"],
        "aggregate_type": "payments.paymentattempt",
        "aggregate_id": attempt.pk,
        "related": [],
    }
    stored = ProviderEvent.objects.get(event_id=event["id"])
    assert json.loads(stored.raw_body) == event and stored.result == "applied"
    attempt.refresh_from_db()
    assert attempt.state == "captured"


@pytest.mark.django_db
@pytest.mark.parametrize("header", ["", "t=1,v1=deadbeef", "garbage", None])
def test_a_bad_or_missing_signature_is_401_and_changes_nothing(client, header):
    attempt = make_attempt()
    event = intent_event(attempt, "succeeded")
    if header is None:  # signed with a secret we do not hold
        answer = deliver(client, event, secret="whsec_attacker")
    else:
        answer = deliver(client, event, header=header)

    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "E_SIGNATURE"
    assert not ProviderEvent.objects.exists()
    attempt.refresh_from_db()
    assert attempt.state == "authorized"


@pytest.mark.django_db
def test_a_signature_over_other_bytes_is_refused(client):
    attempt = make_attempt()
    body, signature = signed(intent_event(attempt, "succeeded"), SECRET)

    answer = client.post(
        URL, data=body + b" ", content_type="application/json", HTTP_STRIPE_SIGNATURE=signature
    )

    assert answer.status_code == 401


@pytest.mark.django_db
def test_an_expired_timestamp_is_refused_and_one_within_tolerance_accepted(client):
    attempt = make_attempt()
    signed_at = int(clock.now().timestamp())

    with clock.travel(301):
        late = deliver(client, intent_event(attempt, "succeeded"), timestamp=signed_at)
    with clock.travel(298):  # one second of slack: the header's timestamp is truncated to whole seconds
        in_time = deliver(client, intent_event(attempt, "succeeded"), timestamp=signed_at)

    assert late.status_code == 401 and "tolerance" in late.json()["error"]["message"]
    assert in_time.status_code == 200 and in_time.json()["result"] == "applied"


@pytest.mark.django_db
def test_during_rotation_both_secrets_are_accepted(client, settings):
    settings.STRIPE_WEBHOOK_SECRETS = ["whsec_new", "whsec_old"]
    attempt = make_attempt(state="requested")

    with_old = deliver(client, intent_event(attempt, "requires_capture"), secret="whsec_old")
    event = intent_event(attempt, "succeeded")
    body = json.dumps(event).encode()
    t = int(clock.now().timestamp())
    new_sig = sign(body, "whsec_new", t).split(",")[1]
    header = f"t={t},v1={'0' * 64},{new_sig}"  # Stripe sends one v1 per active secret
    with_both = client.post(URL, data=body, content_type="application/json", HTTP_STRIPE_SIGNATURE=header)

    assert (with_old.status_code, with_old.json()["result"]) == (200, "applied")
    assert (with_both.status_code, with_both.json()["result"]) == (200, "applied")


@pytest.mark.django_db
def test_a_duplicate_delivery_is_already_applied(client):
    attempt = make_attempt()
    event = intent_event(attempt, "succeeded")

    first = deliver(client, event)
    second = deliver(client, event)

    assert first.json()["result"] == "applied"
    assert second.status_code == 200
    assert (second.json()["result"], second.json()["replayed"]) == ("already_applied", True)
    assert second.json()["transition_id"] == first.json()["transition_id"]
    assert ProviderEvent.objects.get(event_id=event["id"]).deliveries == 2
    assert Transition.objects.filter(aggregate_id=attempt.pk, event_type="captured").count() == 1


@pytest.mark.django_db
def test_the_same_fact_in_another_event_is_already_applied(client):
    attempt = make_attempt()

    deliver(client, intent_event(attempt, "succeeded"))
    other = deliver(
        client, intent_event(attempt, "succeeded")
    )  # a different event id, the same provider fact

    assert (other.json()["result"], other.json()["replayed"]) == ("already_applied", True)


@pytest.mark.django_db
def test_out_of_order_events_leave_the_newer_fact_standing(client):
    attempt = make_attempt(state="requested")

    capture = deliver(client, intent_event(attempt, "succeeded"))
    authorization = deliver(client, intent_event(attempt, "requires_capture"))

    assert capture.json()["result"] == "applied"
    assert (authorization.status_code, authorization.json()["result"]) == (200, "stale")
    assert authorization.json()["state"] == "captured"
    attempt.refresh_from_db()
    assert attempt.state == "captured"


@pytest.mark.django_db
def test_a_capture_for_an_attempt_that_is_no_longer_current_is_stale_and_kept(client):
    old = make_attempt(state="void_pending", is_current=False)
    event = intent_event(old, "succeeded")

    answer = deliver(client, event)

    assert (answer.status_code, answer.json()["result"], answer.json()["state"]) == (
        200,
        "stale",
        "void_pending",
    )
    stored = ProviderEvent.objects.get(event_id=event["id"])
    assert (stored.result, stored.aggregate_id) == ("stale", old.pk)
    assert (
        Transition.objects.get(pk=answer.json()["transition_id"]).payload["intent_id"]
        == old.provider_intent_id
    )


@pytest.mark.django_db
def test_an_amount_that_disagrees_needs_review(client):
    attempt = make_attempt(amount=1500)

    answer = deliver(client, intent_event(attempt, "succeeded", amount=1499))

    assert (answer.status_code, answer.json()["result"], answer.json()["state"]) == (
        200,
        "needs_review",
        "manual_review",
    )
    attempt.refresh_from_db()
    assert attempt.state == "manual_review"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body", [b"{not json", b"[]", b'{"id": "evt_1", "type": "payment_intent.succeeded"}']
)
def test_a_malformed_body_is_400_and_stores_nothing(client, body):
    signature = sign(body, SECRET, int(clock.now().timestamp()))

    answer = client.post(URL, data=body, content_type="application/json", HTTP_STRIPE_SIGNATURE=signature)

    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "E_VALIDATION"
    assert not ProviderEvent.objects.exists()


@pytest.mark.django_db
def test_events_we_do_not_act_on_are_acknowledged_as_ignored(client):
    event = {"id": "evt_other", "type": "customer.created", "data": {"object": {"id": "cus_1"}}}

    answer = deliver(client, event)

    assert (answer.status_code, answer.json()["result"]) == (200, "ignored")
    assert ProviderEvent.objects.get(event_id="evt_other").result == "ignored"


@pytest.mark.django_db
def test_an_unknown_provider_is_404(client):
    answer = deliver(
        client,
        {"id": "evt_1", "type": "x", "data": {"object": {"id": "y"}}},
        path="/api/v1/webhooks/payments/paypal",
    )

    assert answer.status_code == 404


@pytest.mark.django_db
def test_refund_events_move_the_refund(client):
    attempt = make_attempt(state="captured")
    refund = kernel.create(
        Refund, actor="test", attempt=attempt, refund_key="capture:x", amount=1500, currency="eur"
    )
    event = {
        "id": "evt_refund",
        "type": "refund.updated",
        "data": {
            "object": {
                "id": "re_1",
                "object": "refund",
                "amount": 1500,
                "currency": "eur",
                "status": "succeeded",
                "payment_intent": attempt.provider_intent_id,
                "created": 1,
                "metadata": {"ledgerflow_refund": str(refund.public_id), "try": "1"},
            }
        },
    }

    answer = deliver(client, event)

    assert (answer.json()["result"], answer.json()["state"]) == ("applied", "succeeded")
    refund.refresh_from_db()
    assert refund.provider_refund_id == "re_1"


@pytest.mark.django_db
def test_subscribers_answer_inside_the_webhook_answer(client):
    attempt = make_attempt()
    seen = []

    def order_side(fact):
        seen.append(fact)
        return kernel.Outcome(
            result="applied", state="refund_pending", version=4, transition_id=99, replayed=False, detail=""
        )

    hooks.subscribe("tests.order", order_side)
    try:
        answer = deliver(client, intent_event(attempt, "succeeded"))
    finally:
        hooks.unsubscribe("tests.order", order_side)

    assert [(f.kind, f.fact, f.owner_id) for f in seen] == [("attempt", "captured", attempt.owner_id)]
    assert answer.json()["related"][0]["state"] == "refund_pending"


# --- over real HTTP -------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_deliveries_apply_once(live_server):
    attempt = make_attempt()
    body, signature = signed(intent_event(attempt, "succeeded"), SECRET)
    answers: list[requests.Response] = []
    gate = threading.Barrier(20)

    def post():
        gate.wait()
        answers.append(
            requests.post(
                f"{live_server.url}{URL}",
                data=body,
                timeout=30,
                headers={"Content-Type": "application/json", "Stripe-Signature": signature},
            )
        )

    threads = [threading.Thread(target=post) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(a.status_code for a in answers) == [200] * 20
    results = sorted(a.json()["result"] for a in answers)
    assert results == ["already_applied"] * 19 + ["applied"]
    assert ProviderEvent.objects.get().deliveries == 20
    assert Transition.objects.filter(aggregate_id=attempt.pk, event_type="captured").count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_sandbox_delivers_signed_events_that_the_inbox_classifies(live_server, sandbox, settings):
    from payments import services
    from tests.payments.helpers import drain

    settings.STRIPE_WEBHOOK_SECRETS = [sandbox.webhook_secret]
    sandbox.configure(webhook_url=f"{live_server.url}/api/v1/webhooks/payments/sandbox")
    sandbox.webhooks(duplicate=1)
    attempt = services.payment_attempt_start(
        owner_type="tests.order", owner_id="o-live", amount=990, currency="eur", actor="test"
    )
    drain()
    services.payment_attempt_capture(attempt_id=attempt.pk, actor="test")
    drain()

    ledger = sandbox.wait_webhooks_idle()
    deadline = time.monotonic() + 10
    while ProviderEvent.objects.count() < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {d["status_code"] for d in ledger["deliveries"]} == {200}
    by_type = {e.event_type: e for e in ProviderEvent.objects.all()}
    # Each fact reaches us twice (the API answer drained by the worker, and the webhook), in whichever
    # order the network delivers them: one of the two applies it, the other is already_applied.
    assert by_type["payment_intent.amount_capturable_updated"].result in ("applied", "already_applied")
    assert by_type["payment_intent.succeeded"].result in ("applied", "already_applied")
    applied = list(Transition.objects.filter(aggregate_type="payments.paymentattempt", aggregate_id=attempt.pk,
                                             result="applied").values_list("event_type", flat=True))
    assert len(applied) == len(set(applied)), applied  # no fact moved the attempt twice
    attempt.refresh_from_db()
    assert attempt.state == "captured"
    assert by_type["payment_intent.created"].result == "ignored"
    assert {e.deliveries for e in ProviderEvent.objects.all()} == {2}

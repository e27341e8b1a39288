"""Payment attempts through the outbox against the sandbox provider over real HTTP."""

from __future__ import annotations

import pytest

from payments import hooks, services
from payments.models import EFFECT_QUERY_ATTEMPT, QUERY_DELAY, PaymentAttempt
from tests.payments.helpers import drain, pending_effects
from workflow import clock
from workflow.models import OutboxItem

pytestmark = pytest.mark.django_db
OWNER = "tests.order"


def start(owner_id="o-1", amount=4200, currency="EUR", **kwargs) -> PaymentAttempt:
    return services.payment_attempt_start(
        owner_type=OWNER, owner_id=owner_id, amount=amount, currency=currency, actor="test", **kwargs
    )


def authorized(owner_id="o-1", **kwargs) -> PaymentAttempt:
    attempt = start(owner_id, **kwargs)
    drain()
    attempt.refresh_from_db()
    assert attempt.state == "authorized"
    return attempt


def test_start_authorizes_at_the_provider_and_capture_captures(sandbox):
    attempt = start()
    assert attempt.state == "requested"
    assert [i.effect_key for i in pending_effects()] == [f"payatt:{attempt.public_id}:create"]

    drain()
    attempt.refresh_from_db()
    intent = sandbox.ledger()["payment_intents"][0]
    assert (attempt.state, attempt.provider_intent_id) == ("authorized", intent["id"])
    assert intent["metadata"]["ledgerflow_attempt"] == str(attempt.public_id)
    assert (intent["amount"], intent["currency"], intent["status"]) == (4200, "eur", "requires_capture")

    services.payment_attempt_capture(attempt_id=attempt.pk, actor="test")
    drain()

    attempt.refresh_from_db()
    assert (attempt.state, attempt.captured_amount) == ("captured", 4200)
    assert sandbox.ledger()["payment_intents"][0]["status"] == "succeeded"
    keys = [k["key"] for k in sandbox.ledger()["idempotency_keys"]]
    assert keys == [f"payatt:{attempt.public_id}:create", f"payatt:{attempt.public_id}:capture"]


def test_a_repeated_capture_command_is_a_replay(sandbox):
    attempt = authorized()

    first = services.payment_attempt_capture(attempt_id=attempt.pk, actor="test")
    second = services.payment_attempt_capture(attempt_id=attempt.pk, actor="test")

    assert (first.result, second.result) == ("applied", "already_applied")
    assert len(pending_effects()) == 1


def test_a_declined_card_fails_the_attempt(sandbox):
    attempt = start(payment_method="pm_card_chargeDeclined")

    drain()

    attempt.refresh_from_db()
    assert (attempt.state, attempt.decline_code) == ("failed", "card_declined")


def test_void_cancels_the_authorization(sandbox):
    attempt = authorized()

    services.payment_attempt_void(attempt_id=attempt.pk, actor="test", reason="buyer cancelled")
    drain()

    attempt.refresh_from_db()
    assert attempt.state == "voided"
    assert sandbox.ledger()["payment_intents"][0]["status"] == "canceled"


def test_a_capture_that_times_out_is_unknown_until_a_query_resolves_it(sandbox, settings):
    settings.STRIPE_TIMEOUT_SECONDS = 0.5
    attempt = authorized()
    sandbox.fault("payment_intent.capture", "delay", seconds=2, when="after")
    services.payment_attempt_capture(attempt_id=attempt.pk, actor="test")

    assert drain() == ["delivered"]  # the capture call: timed out, recorded as unknown
    attempt.refresh_from_db()
    assert (attempt.state, attempt.pending_operation) == ("unknown", "capture")
    assert [i.effect_type for i in pending_effects()] == [EFFECT_QUERY_ATTEMPT]

    with clock.travel(QUERY_DELAY):
        drain()  # the query

    attempt.refresh_from_db()
    assert attempt.state == "captured"
    ledger = sandbox.ledger()
    assert [e["type"] for e in ledger["events"]].count("payment_intent.succeeded") == 1
    assert [k["path"].endswith("/capture") for k in ledger["idempotency_keys"]].count(True) == 1


def test_a_capture_whose_outcome_is_unknown_and_did_not_happen_is_promised_again_under_the_same_key(
    sandbox, settings
):
    settings.STRIPE_TIMEOUT_SECONDS = 0.5
    attempt = authorized()
    sandbox.fault("payment_intent.capture", "error", status=500)  # refused before any effect
    services.payment_attempt_capture(attempt_id=attempt.pk, actor="test")

    drain()
    attempt.refresh_from_db()
    assert attempt.state == "unknown"
    with clock.travel(QUERY_DELAY):
        drain()  # the query finds it still authorized: the capture is promised again, same provider key

    attempt.refresh_from_db()
    assert attempt.state == "captured"
    ledger = sandbox.ledger()
    assert [e["type"] for e in ledger["events"]].count("payment_intent.succeeded") == 1
    capture_keys = {k["key"] for k in ledger["idempotency_keys"] if k["path"].endswith("/capture")}
    assert capture_keys == {f"payatt:{attempt.public_id}:capture"}


def test_a_void_racing_a_capture_records_the_capture(sandbox):
    heard = []
    hooks.subscribe(OWNER, lambda fact: heard.append(fact))
    try:
        attempt = authorized()
        sandbox.fault("payment_intent.cancel", "capture_wins")

        services.payment_attempt_void(attempt_id=attempt.pk, actor="test", reason="buyer cancelled")
        drain()
    finally:
        hooks._subscribers.pop(OWNER, None)

    attempt.refresh_from_db()
    assert attempt.state == "captured"
    captured = [f for f in heard if f.fact == "captured"]
    assert len(captured) == 1
    assert (captured[0].result, captured[0].is_current_attempt, captured[0].owner_id) == (
        "applied",
        True,
        "o-1",
    )
    assert captured[0].identity == f"{attempt.provider_intent_id}:succeeded"


def test_a_new_attempt_supersedes_the_old_one_and_voids_it(sandbox):
    old = authorized()

    new = start()
    drain()

    old.refresh_from_db()
    new.refresh_from_db()
    assert (old.state, old.is_current) == ("voided", False)
    assert (new.state, new.is_current, new.sequence) == ("authorized", True, 2)


def test_an_old_attempt_reporting_a_capture_after_a_new_one_began_is_stale(sandbox):
    old = authorized()
    sandbox.provider().capture_intent(old.provider_intent_id, idempotency_key="captured-elsewhere")

    start()  # supersedes old: its void meets the provider's capture
    drain()

    old.refresh_from_db()
    assert (old.state, old.is_current) == ("void_pending", False)
    from workflow.models import Transition

    stale = Transition.objects.get(
        aggregate_type="payments.paymentattempt", aggregate_id=old.pk, event_type="captured"
    )
    assert (stale.result, stale.to_state) == ("stale", "void_pending")
    assert stale.payload["intent_id"] == old.provider_intent_id  # kept for reconciliation


def test_a_subscriber_failure_rolls_the_fact_back(sandbox):
    attempt = authorized()
    services.payment_attempt_capture(attempt_id=attempt.pk, actor="test")

    def broken(fact):
        raise RuntimeError("order side down")

    hooks.subscribe(OWNER, broken)
    try:
        drain()
    finally:
        hooks._subscribers.pop(OWNER, None)

    attempt.refresh_from_db()
    assert attempt.state == "capture_pending"
    assert OutboxItem.objects.get(effect_key=f"payatt:{attempt.public_id}:capture").state == "retry_scheduled"


def test_a_create_that_times_out_is_resolved_by_replaying_it_under_its_key(sandbox, settings):
    settings.STRIPE_TIMEOUT_SECONDS = 0.5
    sandbox.fault("payment_intent.create", "delay", seconds=2, when="after")
    attempt = start()

    drain()
    attempt.refresh_from_db()
    assert (attempt.state, attempt.pending_operation, attempt.provider_intent_id) == ("unknown", "create", "")
    with clock.travel(QUERY_DELAY):
        drain()

    attempt.refresh_from_db()
    intents = sandbox.ledger()["payment_intents"]
    assert len(intents) == 1
    assert (attempt.state, attempt.provider_intent_id) == ("authorized", intents[0]["id"])


def test_a_caller_may_deliver_the_authorization_now_instead_of_waiting_for_a_worker(sandbox):
    attempt = start()

    attempt = services.payment_attempt_deliver_now(attempt_id=attempt.pk)

    assert attempt.state == "authorized"
    assert pending_effects() == []

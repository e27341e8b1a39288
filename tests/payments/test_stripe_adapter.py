"""The Stripe adapter (official SDK) against the sandbox provider, over real HTTP."""

from __future__ import annotations

import pytest

from payments.providers import (
    IdempotencyKeyReused,
    NotFoundAtProvider,
    OutcomeUnknown,
    PaymentDeclined,
    UnexpectedProviderState,
)


@pytest.fixture
def provider(sandbox):
    return sandbox.provider(timeout_seconds=1.0)


def authorize(provider, key="eff:create:1", amount=2500, **kwargs):
    return provider.create_intent(
        amount=amount, currency="EUR", idempotency_key=key, metadata={"attempt_id": "7"}, **kwargs
    )


def test_every_call_round_trips(sandbox, provider):
    created = authorize(provider)
    assert (created.status, created.observation, created.amount, created.currency) == (
        "requires_capture",
        "authorized",
        2500,
        "eur",
    )
    assert created.metadata == {"attempt_id": "7"}
    assert provider.retrieve_intent(created.intent_id) == created

    captured = provider.capture_intent(created.intent_id, idempotency_key="eff:capture:1")
    assert (captured.observation, captured.amount_received) == ("captured", 2500)

    refund = provider.create_refund(
        intent_id=created.intent_id,
        idempotency_key="eff:refund:1",
        amount=1000,
        metadata={"refund_key": "rf-1"},
    )
    assert (refund.status, refund.amount, refund.intent_id) == ("succeeded", 1000, created.intent_id)
    assert provider.retrieve_refund(refund.refund_id) == refund
    assert provider.list_refunds(intent_id=created.intent_id) == [refund]

    other = authorize(provider, key="eff:create:2", amount=300)
    voided = provider.cancel_intent(
        other.intent_id, idempotency_key="eff:void:2", reason="requested_by_customer"
    )
    assert voided.observation == "voided"
    assert {i.intent_id for i in provider.iter_intents()} == {created.intent_id, other.intent_id}


def test_a_replayed_call_is_marked_and_changes_nothing(sandbox, provider):
    first = authorize(provider)
    again = authorize(provider)

    assert again.replayed and not first.replayed
    assert again.intent_id == first.intent_id
    assert len(sandbox.ledger()["payment_intents"]) == 1


def test_a_declined_card_is_payment_declined_with_the_intent(sandbox, provider):
    with pytest.raises(PaymentDeclined) as declined:
        authorize(provider, payment_method="pm_card_chargeDeclinedInsufficientFunds")

    assert declined.value.decline_code == "insufficient_funds"
    assert declined.value.intent.observation == "failed"


def test_a_refund_whose_acknowledgement_is_lost_is_retried_under_the_same_key(sandbox, provider):
    intent = authorize(provider)
    provider.capture_intent(intent.intent_id, idempotency_key="eff:capture:1")
    sandbox.fault("refund.create", "drop_response")

    with pytest.raises(OutcomeUnknown):
        provider.create_refund(intent_id=intent.intent_id, idempotency_key="refund:capture-1")
    retried = provider.create_refund(intent_id=intent.intent_id, idempotency_key="refund:capture-1")

    assert retried.replayed
    assert [r["id"] for r in sandbox.ledger()["refunds"]] == [retried.refund_id]


def test_a_capture_that_times_out_is_outcome_unknown_and_a_query_resolves_it(sandbox, provider):
    intent = authorize(provider)
    sandbox.fault("payment_intent.capture", "delay", seconds=3, when="after")

    with pytest.raises(OutcomeUnknown):
        provider.capture_intent(intent.intent_id, idempotency_key="eff:capture:1")
    queried = provider.retrieve_intent(intent.intent_id)

    assert queried.observation == "captured"
    assert len(sandbox.events("payment_intent.succeeded")) == 1


def test_sdk_retries_are_off_so_a_5xx_surfaces_as_outcome_unknown(sandbox, provider):
    sandbox.fault("payment_intent.create", "error", status=500)

    with pytest.raises(OutcomeUnknown):
        authorize(provider)

    assert sandbox.ledger()["payment_intents"] == []
    assert sandbox.ledger()["faults"] == []


def test_cancel_after_a_racing_capture_reports_the_captured_intent(sandbox, provider):
    intent = authorize(provider)
    sandbox.fault("payment_intent.cancel", "capture_wins")

    with pytest.raises(UnexpectedProviderState) as unexpected:
        provider.cancel_intent(intent.intent_id, idempotency_key="eff:void:1")

    assert unexpected.value.intent.observation == "captured"


def test_reusing_a_key_for_different_parameters_is_permanent(sandbox, provider):
    authorize(provider)

    with pytest.raises(IdempotencyKeyReused):
        authorize(provider, amount=2600)


def test_an_unknown_intent_is_not_found(sandbox, provider):
    with pytest.raises(NotFoundAtProvider):
        provider.retrieve_intent("pi_does_not_exist")

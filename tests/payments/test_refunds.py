"""Refunds through the outbox against the sandbox provider: one refund per key, whatever fails."""

from __future__ import annotations

import pytest

from payments import services
from payments.models import QUERY_DELAY, Refund
from tests.payments.helpers import drain
from workflow import clock
from workflow.errors import IdempotencyConflict, StateTransitionRejected, ValidationFailed

pytestmark = pytest.mark.django_db


@pytest.fixture
def captured(sandbox):
    attempt = services.payment_attempt_start(
        owner_type="tests.order", owner_id="o-9", amount=5000, currency="usd", actor="test"
    )
    drain()
    services.payment_attempt_capture(attempt_id=attempt.pk, actor="test")
    drain()
    attempt.refresh_from_db()
    assert attempt.state == "captured"
    return attempt


def refund_of(attempt, key="capture-1", **kwargs) -> Refund:
    return services.refund_request(
        attempt_id=attempt.pk, refund_key=f"{key}:{attempt.provider_intent_id}", actor="test", **kwargs
    )


def test_a_refund_is_created_at_the_provider_and_succeeds(sandbox, captured):
    refund = refund_of(captured)

    drain()

    refund.refresh_from_db()
    remote = sandbox.ledger()["refunds"]
    assert (refund.state, refund.provider_refund_id) == ("succeeded", remote[0]["id"])
    assert (remote[0]["amount"], remote[0]["metadata"]["ledgerflow_refund"]) == (5000, str(refund.public_id))


def test_the_same_refund_key_answers_the_same_refund(sandbox, captured):
    first = refund_of(captured, amount=2000)
    again = refund_of(captured, amount=2000)

    assert again.pk == first.pk
    with pytest.raises(IdempotencyConflict):
        refund_of(captured, amount=1000)


def test_refunds_are_only_for_captured_attempts_and_never_more_than_captured(sandbox, captured):
    other = services.payment_attempt_start(
        owner_type="tests.order", owner_id="o-10", amount=100, currency="usd", actor="test"
    )
    with pytest.raises(StateTransitionRejected):
        refund_of(other)
    refund_of(captured, key="first", amount=4000)
    with pytest.raises(ValidationFailed):
        refund_of(captured, key="second", amount=1001)


def test_a_refund_whose_acknowledgement_is_lost_ends_as_one_refund(sandbox, captured):
    refund = refund_of(captured)
    sandbox.fault("refund.create", "drop_response")

    drain()
    refund.refresh_from_db()
    assert refund.state == "unknown"
    with clock.travel(QUERY_DELAY):
        drain()  # the query finds the refund the provider made

    refund.refresh_from_db()
    remote = sandbox.ledger()["refunds"]
    assert len(remote) == 1
    assert (refund.state, refund.provider_refund_id) == ("succeeded", remote[0]["id"])


def test_a_worker_crash_after_the_provider_refunded_retries_with_the_same_key(sandbox, captured, monkeypatch):
    refund = refund_of(captured)
    real = services.refund_record_result
    crashes = []

    def crash_once(**kwargs):
        if not crashes:
            crashes.append(1)
            raise RuntimeError("worker died before recording the answer")
        return real(**kwargs)

    monkeypatch.setattr(services, "refund_record_result", crash_once)

    assert drain() == ["attempt_failed"]
    with clock.travel(3600):
        drain()

    refund.refresh_from_db()
    ledger = sandbox.ledger()
    assert refund.state == "succeeded"
    assert len(ledger["refunds"]) == 1
    assert [k["key"] for k in ledger["idempotency_keys"] if k["path"] == "/v1/refunds"] == [
        refund.effect_key()
    ]


def test_an_operator_retries_a_failed_refund_under_a_new_key(sandbox, captured):
    sandbox.configure(refund_initial_status="pending")
    refund = refund_of(captured)
    drain()
    refund.refresh_from_db()
    assert refund.state == "pending"
    sandbox.settle_refund(refund.provider_refund_id, "failed")
    services.refund_record_result(
        refund_id=refund.pk, result=sandbox.provider().retrieve_refund(refund.provider_refund_id)
    )
    refund.refresh_from_db()
    assert refund.state == "failed"

    with pytest.raises(ValidationFailed):
        services.refund_retry(refund_id=refund.pk, actor="operator:ann", reason="")
    preview = services.refund_retry(
        refund_id=refund.pk, actor="operator:ann", reason="bank fixed", dry_run=True
    )
    assert (preview.result, preview.state) == ("applied", "requested")
    sandbox.configure(refund_initial_status="succeeded")
    outcome = services.refund_retry(refund_id=refund.pk, actor="operator:ann", reason="bank fixed")
    drain()

    refund.refresh_from_db()
    assert outcome.result == "applied"
    assert (refund.state, refund.tries) == ("succeeded", 2)
    keys = [k["key"] for k in sandbox.ledger()["idempotency_keys"] if k["path"] == "/v1/refunds"]
    assert keys == [f"refund:{refund.refund_key}", f"refund:{refund.refund_key}:try2"]
    assert [r["status"] for r in sandbox.ledger()["refunds"]] == ["succeeded", "failed"]

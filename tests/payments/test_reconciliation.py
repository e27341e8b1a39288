"""Reconciliation against the sandbox: each planted disagreement is found, nothing else; repairs go
through apply with the operator's actor and reason."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from payments import services
from payments.models import Discrepancy, PaymentAttempt, Refund
from payments.reconciliation import discrepancy_dismiss, discrepancy_repair, reconciliation_run
from tests.payments.helpers import drain
from workflow.errors import ValidationFailed
from workflow.models import Transition

pytestmark = pytest.mark.django_db


def start(owner_id, amount=1000):
    attempt = services.payment_attempt_start(
        owner_type="tests.order", owner_id=owner_id, amount=amount, currency="eur", actor="test"
    )
    drain()
    attempt.refresh_from_db()
    return attempt


def capture(attempt):
    services.payment_attempt_capture(attempt_id=attempt.pk, actor="test")
    drain()
    attempt.refresh_from_db()
    return attempt


@pytest.fixture
def planted(sandbox):
    """Agreeing payments of every kind, plus four planted disagreements."""
    provider = sandbox.provider()
    agree_authorized = start("agree-1")
    agree_captured = capture(start("agree-2"))
    agree_voided = start("agree-3")
    services.payment_attempt_void(attempt_id=agree_voided.pk, actor="test")
    drain()
    agree_refunded = capture(start("agree-4"))
    services.refund_request(attempt_id=agree_refunded.pk, refund_key="agree-4", actor="test")
    drain()

    # 1. captured at the provider (its webhook never came), authorized here
    captured_there = start("plant-1")
    provider.capture_intent(captured_there.provider_intent_id, idempotency_key="dashboard-capture")
    # 2. voided at the provider, authorized here
    voided_there = start("plant-2")
    provider.cancel_intent(voided_there.provider_intent_id, idempotency_key="dashboard-void")
    # 3. refunded there, pending here
    sandbox.configure(refund_initial_status="pending")
    refunded = capture(start("plant-3"))
    refund = services.refund_request(attempt_id=refunded.pk, refund_key="plant-3", actor="test")
    drain()
    refund.refresh_from_db()
    assert refund.state == "pending"
    sandbox.settle_refund(refund.provider_refund_id, "succeeded")
    sandbox.configure(refund_initial_status="succeeded")
    # 4. a capture on an abandoned attempt (the old attempt reported success after a new one began)
    abandoned = start("plant-4")
    provider.capture_intent(abandoned.provider_intent_id, idempotency_key="late-capture")
    start("plant-4")
    abandoned.refresh_from_db()
    assert (abandoned.state, abandoned.is_current) == ("void_pending", False)

    return {
        "captured_there": captured_there,
        "voided_there": voided_there,
        "refund": refund,
        "abandoned": abandoned,
        "agreeing": [agree_authorized, agree_captured, agree_voided, agree_refunded],
    }


def test_each_planted_disagreement_is_found_and_nothing_else(planted):
    report = reconciliation_run(grace_seconds=0)

    found = {(d.kind, d.attempt_id, d.refund_id, d.proposed_repair) for d in report.found}
    assert found == {
        ("captured_not_recorded", planted["captured_there"].pk, None, "apply_provider_fact"),
        ("voided_not_recorded", planted["voided_there"].pk, None, "apply_provider_fact"),
        (
            "refund_succeeded_not_recorded",
            planted["refund"].attempt_id,
            planted["refund"].pk,
            "apply_provider_fact",
        ),
        ("capture_on_abandoned_attempt", planted["abandoned"].pk, None, "refund_superseded_capture"),
    }
    assert report.checked_attempts == 9
    again = reconciliation_run(grace_seconds=0)
    assert {d.pk for d in again.found} == {d.pk for d in report.found}  # a re-run refreshes, never duplicates
    assert Discrepancy.objects.count() == 4


def test_recent_changes_are_left_alone_within_the_grace_period(planted):
    assert reconciliation_run(grace_seconds=3600).found == []


def test_repairs_go_through_apply_with_actor_and_reason(planted, sandbox):
    report = reconciliation_run(grace_seconds=0)
    by_kind = {d.kind: d for d in report.found}

    with pytest.raises(ValidationFailed):
        discrepancy_repair(
            discrepancy_id=by_kind["captured_not_recorded"].pk, actor="operator:ann", reason=" "
        )
    preview = discrepancy_repair(
        discrepancy_id=by_kind["captured_not_recorded"].pk,
        actor="operator:ann",
        reason="provider dashboard shows the capture",
        dry_run=True,
    )
    assert preview.repair_outcome.state == "captured"
    assert PaymentAttempt.objects.get(pk=planted["captured_there"].pk).state == "authorized"

    results = {
        kind: discrepancy_repair(discrepancy_id=d.pk, actor="operator:ann", reason=f"reconcile {kind}")
        for kind, d in by_kind.items()
    }
    drain()  # the superseded capture's refund goes out

    states = {
        key: PaymentAttempt.objects.get(pk=planted[key].pk).state
        for key in ("captured_there", "voided_there", "abandoned")
    }
    assert states == {"captured_there": "captured", "voided_there": "voided", "abandoned": "captured"}
    assert Refund.objects.get(pk=planted["refund"].pk).state == "succeeded"
    superseded_refund = results["capture_on_abandoned_attempt"].refund
    superseded_refund.refresh_from_db()
    assert (superseded_refund.state, superseded_refund.refund_key) == (
        "succeeded",
        f"superseded:{planted['abandoned'].provider_intent_id}",
    )
    repair_row = Transition.objects.get(
        aggregate_type="payments.paymentattempt",
        aggregate_id=planted["abandoned"].pk,
        event_type="record_superseded_capture",
    )
    assert (repair_row.actor, repair_row.reason) == ("operator:ann", "reconcile capture_on_abandoned_attempt")
    assert set(Discrepancy.objects.values_list("state", flat=True)) == {"repaired"}
    assert reconciliation_run(grace_seconds=0).found == []


def test_an_operator_may_dismiss_a_discrepancy(planted):
    found = reconciliation_run(grace_seconds=0).found[0]

    outcome = discrepancy_dismiss(discrepancy_id=found.pk, actor="operator:bo", reason="known test charge")

    assert (outcome.result, outcome.state) == ("applied", "dismissed")


def test_a_disagreement_that_resolves_itself_is_closed_by_the_next_run(planted):
    d = next(d for d in reconciliation_run(grace_seconds=0).found if d.kind == "voided_not_recorded")
    services.payment_attempt_record_intent(attempt_id=d.attempt_id, intent=services_provider_intent(d))

    reconciliation_run(grace_seconds=0)

    d.refresh_from_db()
    assert d.state == "dismissed"


def services_provider_intent(d):
    from payments.providers import get_provider

    return get_provider().retrieve_intent(d.provider_object_id)


def test_the_command_prints_the_report(planted, capsys):
    call_command("reconcile_payments", "--grace-seconds", "0")

    report = json.loads(capsys.readouterr().out)
    assert len(report["discrepancies"]) == 4

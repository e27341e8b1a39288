"""Samples for the generic (state × event) table test of the payments machines."""

import uuid

from payments.models import Discrepancy, PaymentAttempt, Refund
from tests.machines import MachineSamples, register
from workflow import kernel

AMOUNT = 1000


def build_attempt(state: str) -> PaymentAttempt:
    tag = uuid.uuid4().hex[:12]
    return kernel.create(
        PaymentAttempt,
        actor="test",
        state=state,
        owner_type="tests.owner",
        owner_id=tag,
        amount=AMOUNT,
        currency="eur",
        provider_intent_id=f"pi_{tag}",
        is_current=True,
    )


def intent_payload(status: str, **extra):
    return lambda a: {
        "intent_id": a.provider_intent_id,
        "status": status,
        "amount": AMOUNT,
        "currency": "eur",
        **extra,
    }


register(
    MachineSamples(
        model=PaymentAttempt,
        build=build_attempt,
        payloads={
            "authorized": intent_payload("requires_capture"),
            "not_performed": intent_payload("requires_capture"),
            "captured": intent_payload("succeeded"),
            "voided": intent_payload("canceled"),
            "failed": intent_payload("requires_payment_method", decline_code="card_declined"),
            "record_superseded_capture": intent_payload("succeeded"),
            "outcome_unknown": lambda a: {"operation": "capture", "error": "timed out"},
            "resolve": lambda a: {"decision": "captured"},
        },
    )
)


def build_refund(state: str) -> Refund:
    attempt = build_attempt(PaymentAttempt.State.CAPTURED)
    tag = uuid.uuid4().hex[:12]
    return kernel.create(
        Refund,
        actor="test",
        state=state,
        attempt=attempt,
        refund_key=f"capture:{tag}",
        amount=500,
        currency="eur",
        provider_refund_id=f"re_{tag}",
    )


def refund_payload(status: str):
    return lambda r: {"refund_id": r.provider_refund_id, "status": status, "amount": 500, "currency": "eur"}


register(
    MachineSamples(
        model=Refund,
        build=build_refund,
        payloads={
            "pending": refund_payload("pending"),
            "succeeded": refund_payload("succeeded"),
            "failed": refund_payload("failed"),
            "outcome_unknown": lambda r: {"error": "timed out"},
            "resolve": lambda r: {"decision": "succeeded"},
        },
    )
)


def build_discrepancy(state: str) -> Discrepancy:
    return kernel.create(
        Discrepancy,
        actor="test",
        state=state,
        kind=Discrepancy.Kind.CAPTURED_NOT_RECORDED,
        fingerprint=uuid.uuid4().hex,
        proposed_repair=Discrepancy.Repair.REVIEW,
    )


register(MachineSamples(model=Discrepancy, build=build_discrepancy))

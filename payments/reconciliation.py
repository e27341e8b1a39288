"""Reconciliation: compare the provider's PaymentIntents and Refunds with local facts.

Every disagreement becomes (or refreshes) one ``Discrepancy`` with a proposed, bounded repair; nothing
local is overwritten here. ``discrepancy_repair`` applies the proposal through ``apply`` with the
operator's actor and reason; ``discrepancy_dismiss`` closes one without a repair.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from django.db import transaction

from workflow import clock, kernel
from workflow.errors import NotFound, StateTransitionRejected
from workflow.kernel import Outcome

from . import services
from .facts import intent_fact, refund_fact
from .models import Discrepancy, PaymentAttempt, Refund
from .providers import IntentResult, NotFoundAtProvider, RefundResult, get_provider

ACTOR = "system:reconciliation"
S = PaymentAttempt.State
K = Discrepancy.Kind
R = Discrepancy.Repair
OPEN_ATTEMPT_STATES = {S.REQUESTED, S.AUTHORIZED, S.CAPTURE_PENDING, S.VOID_PENDING, S.UNKNOWN}
# Local states that are simply waiting for their promised call (the provider being behind is normal).
IN_FLIGHT = {
    (S.CAPTURE_PENDING, "authorized"),
    (S.VOID_PENDING, "authorized"),
    (S.REQUESTED, "requested"),
    (S.UNKNOWN, "requested"),
}
OPEN_REFUND_STATES = {Refund.State.REQUESTED, Refund.State.PENDING, Refund.State.UNKNOWN}


@dataclasses.dataclass
class ReconciliationReport:
    checked_attempts: int = 0
    checked_refunds: int = 0
    found: list[Discrepancy] = dataclasses.field(default_factory=list)
    restored: list[int] = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "checked_attempts": self.checked_attempts,
            "checked_refunds": self.checked_refunds,
            "discrepancies": [
                {
                    "id": d.pk,
                    "kind": d.kind,
                    "attempt_id": d.attempt_id,
                    "refund_id": d.refund_id,
                    "provider_object_id": d.provider_object_id,
                    "local_state": d.local_state,
                    "provider_status": d.provider_status,
                    "proposed_repair": d.proposed_repair,
                    "detail": d.detail,
                }
                for d in self.found
            ],
            "agreement_restored": self.restored,
        }


def reconciliation_run(*, since_hours: float = 72, grace_seconds: float = 300) -> ReconciliationReport:
    """Compare attempts created in the last ``since_hours`` (and their refunds) with the provider.

    ``grace_seconds``: a local aggregate that entered its state more recently than this is left alone
    (its promised call or webhook is probably still on the way).
    """
    now = clock.now()
    since = now - timedelta(hours=since_hours)
    settled_before = now - timedelta(seconds=grace_seconds)
    provider = get_provider()
    report = ReconciliationReport()
    seen: set[str] = set()
    known_intents: set[str] = set()
    for attempt in PaymentAttempt.objects.filter(created_at__gte=since).order_by("id"):
        report.checked_attempts += 1
        if attempt.provider_intent_id:
            known_intents.add(attempt.provider_intent_id)
        if attempt.entered_state_at > settled_before or attempt.state == S.MANUAL_REVIEW:
            continue
        intent = _intent_of(provider, attempt)
        for found in _compare_attempt(attempt, intent):
            report.found.append(_record(found, seen))
        if intent is not None:
            known_intents.add(intent.intent_id)
            refunds = Refund.objects.filter(attempt=attempt)
            if intent.observation == "captured" or refunds.exists():
                provider_refunds = provider.list_refunds(intent_id=intent.intent_id)
                report.checked_refunds += len(provider_refunds)
                for found in _compare_refunds(attempt, list(refunds), provider_refunds, settled_before):
                    report.found.append(_record(found, seen))
    for intent in provider.iter_intents(created_gte=int(since.timestamp())):
        if intent.intent_id in known_intents:
            continue
        if (
            intent.metadata.get("ledgerflow_attempt")
            and not PaymentAttempt.objects.filter(public_id=intent.metadata["ledgerflow_attempt"]).exists()
        ):
            report.found.append(
                _record(
                    dict(
                        kind=K.UNKNOWN_INTENT,
                        attempt=None,
                        refund=None,
                        provider_object_id=intent.intent_id,
                        local_state="",
                        provider_status=intent.status,
                        proposed_repair=R.REVIEW,
                        detail=f"provider holds {intent.intent_id} ({intent.status}) for an unknown attempt",
                        evidence={"intent": intent.raw},
                    ),
                    seen,
                )
            )
    for stale in Discrepancy.objects.filter(state=Discrepancy.State.OPEN).exclude(fingerprint__in=seen):
        outcome = kernel.apply(
            stale,
            "agreement_restored",
            f"restored:{now.isoformat()}",
            {},
            actor=ACTOR,
            reason="a later reconciliation run found agreement",
        )
        if outcome.result == "applied":
            report.restored.append(stale.pk)
    return report


def _intent_of(provider, attempt: PaymentAttempt) -> IntentResult | None:
    if not attempt.provider_intent_id:
        return None
    try:
        return provider.retrieve_intent(attempt.provider_intent_id)
    except NotFoundAtProvider:
        return None


def _superseded(attempt: PaymentAttempt) -> bool:
    """Abandoned, or failed and followed by a newer attempt of the same owner (a failed attempt is not
    abandoned, so it keeps ``is_current``; its intent may still be confirmed and captured later)."""
    return not attempt.is_current or (
        attempt.state == S.FAILED
        and PaymentAttempt.objects.filter(
            owner_type=attempt.owner_type, owner_id=attempt.owner_id, sequence__gt=attempt.sequence
        ).exists()
    )


def _compare_attempt(attempt: PaymentAttempt, intent: IntentResult | None) -> list[dict[str, Any]]:
    base = dict(attempt=attempt, refund=None, local_state=attempt.state)
    if intent is None:
        if attempt.state in (S.REQUESTED, S.UNKNOWN, S.VOID_PENDING) or attempt.state == S.FAILED:
            return []  # nothing was confirmed at the provider, and nothing local claims it was
        return [
            dict(
                base,
                kind=K.INTENT_MISSING,
                provider_object_id=attempt.provider_intent_id,
                provider_status="",
                proposed_repair=R.REVIEW,
                detail=f"attempt is {attempt.state} but the provider has no intent for it",
                evidence={},
            )
        ]
    obs, evidence = intent.observation, {"intent": intent.raw}
    base.update(provider_object_id=intent.intent_id, provider_status=intent.status, evidence=evidence)
    if intent.amount != attempt.amount or intent.currency != attempt.currency:
        return [
            dict(
                base,
                kind=K.AMOUNT_MISMATCH,
                proposed_repair=R.REVIEW,
                detail=f"provider {intent.amount} {intent.currency}; "
                f"{attempt.amount} {attempt.currency} here",
            )
        ]
    local = attempt.state
    if (local, obs) in IN_FLIGHT or obs == "requested":
        return []
    if obs == "captured" and _superseded(attempt) and (local in OPEN_ATTEMPT_STATES or local == S.FAILED):
        return [
            dict(
                base,
                kind=K.CAPTURE_ON_ABANDONED_ATTEMPT,
                proposed_repair=R.REFUND_SUPERSEDED_CAPTURE,
                detail="the provider captured an attempt that was superseded; the money must go back",
            )
        ]
    expected = {"authorized": S.AUTHORIZED, "captured": S.CAPTURED, "voided": S.VOIDED, "failed": S.FAILED}[
        obs
    ]
    if local == expected:
        return []
    if local in OPEN_ATTEMPT_STATES and not (obs == "authorized" and local not in (S.REQUESTED, S.UNKNOWN)):
        kind = {
            "authorized": K.AUTHORIZED_NOT_RECORDED,
            "captured": K.CAPTURED_NOT_RECORDED,
            "voided": K.VOIDED_NOT_RECORDED,
            "failed": K.FAILED_NOT_RECORDED,
        }[obs]
        return [
            dict(
                base,
                kind=kind,
                proposed_repair=R.APPLY_PROVIDER_FACT,
                detail=f"the provider says {intent.status}; locally the attempt is {local}",
            )
        ]
    return [
        dict(
            base,
            kind=K.LOCAL_STATE_NOT_AT_PROVIDER,
            proposed_repair=R.REVIEW,
            detail=f"locally {local}, but the provider says {intent.status}",
        )
    ]


def _compare_refunds(
    attempt: PaymentAttempt, local_refunds: list[Refund], provider_refunds: list[RefundResult], settled_before
) -> list[dict[str, Any]]:
    found = []
    by_public = {str(r.public_id): r for r in local_refunds}
    matched: set[int] = set()
    for remote in provider_refunds:
        local = next((r for r in local_refunds if r.provider_refund_id == remote.refund_id), None)
        if local is None:
            candidate = by_public.get(remote.metadata.get("ledgerflow_refund", ""))
            if candidate is not None and remote.metadata.get("try", "1") != str(candidate.tries):
                continue  # an earlier try's refund: superseded by the operator's retry
            local = candidate
        base = dict(
            attempt=attempt,
            provider_object_id=remote.refund_id,
            provider_status=remote.status,
            evidence={"refund": remote.raw},
        )
        if local is None:
            found.append(
                dict(
                    base,
                    kind=K.UNKNOWN_REFUND,
                    refund=None,
                    local_state="",
                    proposed_repair=R.REVIEW,
                    detail=f"the provider holds refund {remote.refund_id} that no local refund owns",
                )
            )
            continue
        matched.add(local.pk)
        if local.entered_state_at > settled_before or local.state == Refund.State.MANUAL_REVIEW:
            continue
        base.update(refund=local, local_state=local.state)
        if remote.status == "succeeded" and local.state in OPEN_REFUND_STATES:
            found.append(
                dict(
                    base,
                    kind=K.REFUND_SUCCEEDED_NOT_RECORDED,
                    proposed_repair=R.APPLY_PROVIDER_FACT,
                    detail=f"the provider refunded; locally the refund is {local.state}",
                )
            )
        elif remote.status in ("failed", "canceled") and local.state in OPEN_REFUND_STATES:
            found.append(
                dict(
                    base,
                    kind=K.REFUND_FAILED_NOT_RECORDED,
                    proposed_repair=R.APPLY_PROVIDER_FACT,
                    detail=f"the provider's refund {remote.status}; locally it is {local.state}",
                )
            )
        elif remote.status in ("failed", "canceled") and local.state == Refund.State.SUCCEEDED:
            found.append(
                dict(
                    base,
                    kind=K.LOCAL_STATE_NOT_AT_PROVIDER,
                    proposed_repair=R.REVIEW,
                    detail=f"locally succeeded, but the provider's refund is {remote.status}",
                )
            )
    for local in local_refunds:
        if local.pk not in matched and local.state == Refund.State.SUCCEEDED:
            found.append(
                dict(
                    attempt=attempt,
                    refund=local,
                    kind=K.REFUND_MISSING_AT_PROVIDER,
                    provider_object_id=local.provider_refund_id,
                    provider_status="",
                    local_state=local.state,
                    proposed_repair=R.REVIEW,
                    evidence={},
                    detail="locally succeeded, but the provider lists no such refund",
                )
            )
    return found


def _record(found: dict[str, Any], seen: set[str]) -> Discrepancy:
    subject = (
        found["refund"].pk if found.get("refund") else (found["attempt"].pk if found.get("attempt") else "-")
    )
    fingerprint = f"{found['kind']}:{subject}:{found['provider_object_id']}:{found['provider_status']}"
    seen.add(fingerprint)
    existing = Discrepancy.objects.filter(fingerprint=fingerprint).first()
    if existing is not None:
        Discrepancy.objects.filter(pk=existing.pk).update(last_seen_at=clock.now())  # not state: a sighting
        return existing
    return kernel.create(
        Discrepancy,
        actor=ACTOR,
        reason=found["detail"],
        identity=f"found:{fingerprint}"[:255],
        fingerprint=fingerprint,
        **{k: v for k, v in found.items() if k != "fingerprint"},
    )


# --- repairs ------------------------------------------------------------------------------------
@dataclasses.dataclass
class RepairResult:
    discrepancy: Discrepancy
    repair_outcome: Outcome | None
    discrepancy_outcome: Outcome | None
    refund: Refund | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "discrepancy_id": self.discrepancy.pk,
            "repair": self.repair_outcome.as_dict() if self.repair_outcome else None,
            "discrepancy": self.discrepancy_outcome.as_dict() if self.discrepancy_outcome else None,
            "refund_id": self.refund.pk if self.refund else None,
        }


def _discrepancy(discrepancy_id: int) -> Discrepancy:
    found = Discrepancy.objects.select_related("attempt", "refund").filter(pk=discrepancy_id).first()
    if found is None:
        raise NotFound(f"discrepancy {discrepancy_id} not found")
    return found


@transaction.atomic
def discrepancy_repair(
    *, discrepancy_id: int, actor: str, reason: str, dry_run: bool = False
) -> RepairResult:
    """Apply the proposed repair through ``apply`` (actor and reason required), then close the record."""
    d = _discrepancy(discrepancy_id)
    if d.state != Discrepancy.State.OPEN:
        raise StateTransitionRejected(f"discrepancy {d.pk} is {d.state}", details={"state": d.state})
    if not actor or actor.startswith("system") or not reason.strip():
        from workflow.errors import ValidationFailed

        raise ValidationFailed("a repair needs an operator and a reason", details={"field": "reason"})
    identity = f"reconcile:{d.pk}"
    refund = None
    if d.proposed_repair == R.APPLY_PROVIDER_FACT and d.refund_id:
        fact = refund_fact(RefundResult.from_dict(d.evidence["refund"]))
        outcome, _ = services.refund_apply_fact(
            refund_id=d.refund_id, fact=fact, actor=actor, reason=reason, dry_run=dry_run
        )
    elif d.proposed_repair == R.APPLY_PROVIDER_FACT:
        fact = intent_fact(IntentResult.from_dict(d.evidence["intent"]))
        outcome, _ = services.payment_attempt_apply_fact(
            attempt_id=d.attempt_id, fact=fact, actor=actor, reason=reason, dry_run=dry_run
        )
    elif d.proposed_repair == R.REFUND_SUPERSEDED_CAPTURE:
        intent = IntentResult.from_dict(d.evidence["intent"])
        fact = intent_fact(intent)
        outcome = kernel.apply(
            (PaymentAttempt, d.attempt_id),
            "record_superseded_capture",
            identity,
            fact.payload,
            actor=actor,
            reason=reason,
            dry_run=dry_run,
        )
        if not dry_run and outcome.accepted:
            refund = services.refund_request(
                attempt_id=d.attempt_id,
                refund_key=f"superseded:{intent.intent_id}",
                actor=actor,
                reason=reason,
            )
    else:  # review: route the aggregate to manual review where its machine allows it
        target = (Refund, d.refund_id) if d.refund_id else (PaymentAttempt, d.attempt_id)
        if target[1] is None:
            outcome = None
        else:
            outcome = kernel.apply(
                target,
                "route_to_review",
                identity,
                {"discrepancy": d.pk, "kind": d.kind},
                actor=actor,
                reason=reason,
                dry_run=dry_run,
            )
    closed = None
    if outcome is None or outcome.accepted:
        closed = kernel.apply(
            d, "repair", "repair", {"repair": d.proposed_repair}, actor=actor, reason=reason, dry_run=dry_run
        )
    return RepairResult(d, outcome, closed, refund)


def discrepancy_dismiss(*, discrepancy_id: int, actor: str, reason: str, dry_run: bool = False) -> Outcome:
    return kernel.apply(
        (Discrepancy, discrepancy_id), "dismiss", "dismiss", {}, actor=actor, reason=reason, dry_run=dry_run
    )

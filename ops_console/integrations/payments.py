"""Payment attempts, refunds and discrepancies in the console: titles, provider events verbatim,
and the operator repairs through the payments services."""

from __future__ import annotations

from django import forms
from django.db.models import Q

from payments import reconciliation, services
from payments.models import Discrepancy, PaymentAttempt, ProviderEvent, Refund

from .. import registry
from ..selectors import Classification


def _money(minor: int | None, currency: str) -> str:
    return f"{(minor or 0) / 100:.2f} {currency.upper()}"


def _events(aggregate) -> list[ProviderEvent]:
    return list(
        ProviderEvent.objects.filter(aggregate_type=aggregate.aggregate_label(), aggregate_id=aggregate.pk).order_by(
            "id"
        )[:200]
    )


def _section(extra):
    return registry.Section(
        "Provider events (verbatim)",
        "ops_console/integrations/provider_events.html",
        lambda agg: {"events": _events(agg), **extra(agg)},
    )


def _attempt_title(a: PaymentAttempt) -> str:
    current = "current" if a.is_current else "superseded"
    return f"{_money(a.amount, a.currency)} for {a.owner_type} #{a.owner_id} · attempt {a.sequence} ({current})"


class AttemptDecisionForm(registry.RepairForm):
    decision = forms.ChoiceField(
        choices=[(d, d) for d in ("authorized", "captured", "voided", "failed")],
        help_text="What the provider really holds, after looking.",
    )


class RefundDecisionForm(registry.RepairForm):
    decision = forms.ChoiceField(
        choices=[("succeeded", "succeeded"), ("failed", "failed")],
        help_text="What the provider really did with the refund.",
    )


def _outcomes(result) -> list:
    return [o for o in (result.repair_outcome, result.discrepancy_outcome) if o is not None]


registry.register(
    PaymentAttempt,
    title=_attempt_title,
    current_attempt=lambda a: a.provider_intent_id or None,
    search=lambda q: PaymentAttempt.objects.filter(Q(provider_intent_id=q) | Q(owner_id=q)).order_by("-id"),
    sections=[_section(lambda a: {"refunds": list(a.refunds.order_by("id"))})],
    # record_superseded_capture is reconciliation's repair (via a discrepancy), not a free-standing form.
    generic_repairs=False,
    repairs=[
        registry.Repair(
            key="resolve-review",
            label="Resolve the review",
            event_type="resolve",
            applies=lambda a: a.state == PaymentAttempt.State.MANUAL_REVIEW,
            form_class=AttemptDecisionForm,
            preview=lambda req: services.payment_attempt_resolve_review(
                attempt_id=req.aggregate.pk,
                decision=req.data["decision"],
                actor=req.actor,
                reason=req.reason,
                dry_run=True,
            ),
            submit=lambda req: services.payment_attempt_resolve_review(
                attempt_id=req.aggregate.pk, decision=req.data["decision"], actor=req.actor, reason=req.reason
            ),
        )
    ],
)

registry.register(
    Refund,
    title=lambda r: (
        f"{_money(r.amount, r.currency)} back on attempt #{r.attempt_id} · try {r.tries}"
        + (f" · {r.note}" if r.note else "")
    ),
    current_attempt=lambda r: f"try {r.tries}" + (f" ({r.provider_refund_id})" if r.provider_refund_id else ""),
    search=lambda q: Refund.objects.filter(Q(provider_refund_id=q) | Q(refund_key=q)).order_by("-id"),
    state_classification={Refund.State.FAILED: Classification.RETRIES_EXHAUSTED},
    sections=[_section(lambda r: {"attempt": r.attempt})],
    repairs=[
        registry.Repair(
            key="retry-refund",
            label="Retry the exhausted refund",
            event_type="retry",
            applies=lambda r: r.state == Refund.State.FAILED,
            description="Asks the provider again under a fresh idempotency key (the earlier try stays recorded).",
            preview=lambda req: services.refund_retry(
                refund_id=req.aggregate.pk, actor=req.actor, reason=req.reason, dry_run=True
            ),
            submit=lambda req: services.refund_retry(refund_id=req.aggregate.pk, actor=req.actor, reason=req.reason),
        ),
        registry.Repair(
            key="resolve-review",
            label="Resolve the review",
            event_type="resolve",
            applies=lambda r: r.state == Refund.State.MANUAL_REVIEW,
            form_class=RefundDecisionForm,
            preview=lambda req: services.refund_resolve_review(
                refund_id=req.aggregate.pk,
                decision=req.data["decision"],
                actor=req.actor,
                reason=req.reason,
                dry_run=True,
            ),
            submit=lambda req: services.refund_resolve_review(
                refund_id=req.aggregate.pk, decision=req.data["decision"], actor=req.actor, reason=req.reason
            ),
        ),
    ],
)

registry.register(
    Discrepancy,
    title=lambda d: (
        f"{d.kind}: local {d.local_state or '—'} vs provider {d.provider_status or '—'} · proposed {d.proposed_repair}"
    ),
    state_classification={Discrepancy.State.OPEN: Classification.EVIDENCE_CONFLICTS},
    sections=[
        registry.Section(
            "Evidence (verbatim)",
            "ops_console/integrations/facts.html",
            lambda d: {
                "facts": [
                    ("detail", d.detail),
                    ("evidence", d.evidence),
                    ("attempt", d.attempt_id),
                    ("refund", d.refund_id),
                    ("provider object", d.provider_object_id),
                ]
            },
        )
    ],
    repairs=[
        registry.Repair(
            key="apply-proposed",
            label="Apply the proposed repair",
            event_type="repair",
            applies=lambda d: d.state == Discrepancy.State.OPEN,
            description="Applies the reconciler's proposal through the payments service, then closes this record.",
            preview=lambda req: _outcomes(
                reconciliation.discrepancy_repair(
                    discrepancy_id=req.aggregate.pk, actor=req.actor, reason=req.reason, dry_run=True
                )
            ),
            submit=lambda req: _outcomes(
                reconciliation.discrepancy_repair(discrepancy_id=req.aggregate.pk, actor=req.actor, reason=req.reason)
            ),
        ),
        registry.Repair(
            key="dismiss",
            label="Dismiss (no repair needed)",
            event_type="dismiss",
            applies=lambda d: d.state == Discrepancy.State.OPEN,
            preview=lambda req: reconciliation.discrepancy_dismiss(
                discrepancy_id=req.aggregate.pk, actor=req.actor, reason=req.reason, dry_run=True
            ),
            submit=lambda req: reconciliation.discrepancy_dismiss(
                discrepancy_id=req.aggregate.pk, actor=req.actor, reason=req.reason
            ),
        ),
    ],
)

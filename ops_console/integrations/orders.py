"""Orders, carts and reservations in the console: titles, what the order is linked to (reservations,
payment attempts, refunds), and the operator repairs through the orders services."""

from __future__ import annotations

from django import forms
from django.apps import apps
from django.db.models import Q

from orders.models import Cart, Order, Reservation
from orders.services import orders as order_services
from orders.services import reservations as reservation_services
from workflow import kernel

from .. import registry
from ..selectors import Classification


def _money(minor: int | None, currency: str) -> str:
    return f"{(minor or 0) / 100:.2f} {currency.upper()}"


def _order_title(order: Order) -> str:
    items = sum(int(line.get("quantity", 0)) for line in order.lines or [])
    return f"{_money(order.total_amount, order.currency)} · {items} item(s)"


def _linked(order: Order) -> dict:
    context = {
        "reservations": list(Reservation.objects.filter(order_id=order.pk).order_by("id")),
        "order": order,
        "attempts": [],
        "refunds": [],
    }
    if apps.is_installed("payments"):
        from payments.models import PaymentAttempt, Refund

        attempts = list(
            PaymentAttempt.objects.filter(owner_type=Order.aggregate_label(), owner_id=str(order.pk)).order_by(
                "sequence", "id"
            )
        )
        context["attempts"] = attempts
        context["refunds"] = list(Refund.objects.filter(attempt__in=attempts).order_by("id"))
    return context


class OrderDecisionForm(registry.RepairForm):
    decision = forms.ChoiceField(
        choices=[
            ("refund", "refund the capture"),
            ("accept", "accept: continue to fulfillment"),
            ("cancel", "cancel the order"),
        ],
    )


def _live_reservations(order: Order) -> list[Reservation]:
    return list(Reservation.objects.filter(order_id=order.pk, state__in=Reservation.LIVE_STATES).order_by("id"))


def _release_preview(req: registry.RepairRequest) -> list:
    return [
        kernel.apply(
            r, "release", f"release:order:{req.aggregate.pk}", {}, actor=req.actor, reason=req.reason, dry_run=True
        )
        for r in _live_reservations(req.aggregate)
    ]


def _release_submit(req: registry.RepairRequest) -> list:
    return reservation_services.reservations_release(order_id=req.aggregate.pk, actor=req.actor, reason=req.reason)


# The refund failed at the provider (the order's last applied event says so): a human must retry it.
REFUND_FAILED_SQL = (
    "a.state = 'refund_pending' AND (SELECT t.event_type FROM workflow_transition t "
    "WHERE t.aggregate_type = 'orders.order' AND t.aggregate_id = a.id AND t.result = 'applied' "
    "AND t.event_type NOT IN ('refund_overdue', 'inventory_hold_elapsed') "
    "ORDER BY t.id DESC LIMIT 1) = 'refund_failed'"
)

registry.register(
    Order,
    title=_order_title,
    current_attempt=lambda o: " · ".join(p for p in (o.current_attempt_ref, o.current_provider_ref) if p) or None,
    search=lambda q: Order.objects.filter(
        Q(checkout_key=q)
        | Q(current_provider_ref=q)
        | Q(capture_ref=q)
        | Q(refund_key=q)
        | Q(refund_ref=q)
        | Q(tracking_ref=q)
    ).order_by("-id"),
    why=lambda o: " ".join(p for p in (o.attention, o.review_reason) if p),
    sql_classification=[(REFUND_FAILED_SQL, Classification.RETRIES_EXHAUSTED)],
    sections=[
        registry.Section(
            "Reservations, payment attempts and refunds", "ops_console/integrations/order_links.html", _linked
        )
    ],
    repairs=[
        registry.Repair(
            key="retry-refund",
            label="Retry the refund",
            event_type=None,
            applies=lambda o: o.state == Order.State.REFUND_PENDING and bool(o.refund_key),
            description="A dead refund promise is requeued with the same key (a refund that did happen is not "
            "repeated); a refund the provider refused is tried again by payments.",
            preview=lambda req: order_services.order_retry_refund(
                order_id=req.aggregate.pk, actor=req.actor, reason=req.reason, dry_run=True
            ),
            submit=lambda req: order_services.order_retry_refund(
                order_id=req.aggregate.pk, actor=req.actor, reason=req.reason
            ),
        ),
        registry.Repair(
            key="resolve-review",
            label="Resolve the review",
            event_type="resolve",
            applies=lambda o: o.state == Order.State.MANUAL_REVIEW,
            form_class=OrderDecisionForm,
            preview=lambda req: order_services.order_resolve_review(
                order_id=req.aggregate.pk,
                decision=req.data["decision"],
                actor=req.actor,
                reason=req.reason,
                dry_run=True,
            ),
            submit=lambda req: order_services.order_resolve_review(
                order_id=req.aggregate.pk, decision=req.data["decision"], actor=req.actor, reason=req.reason
            ),
        ),
        registry.Repair(
            key="release-inventory",
            label="Release the inventory held for this order",
            applies=lambda o: bool(_live_reservations(o)),
            description="Puts the held units back on the shelf (each reservation's release goes through the kernel).",
            preview=_release_preview,
            submit=_release_submit,
        ),
    ],
)

registry.register(Cart, title=lambda c: f"order #{c.order_id}" if getattr(c, "order_id", None) else "")
registry.register(
    Reservation,
    title=lambda r: f"{r.quantity} × product #{r.product_id}" + (f" for order #{r.order_id}" if r.order_id else ""),
)

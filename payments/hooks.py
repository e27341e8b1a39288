"""How other apps (orders) hear about payment facts, inside the same transaction.

Payments does not know orders. When a provider fact is classified on a payment attempt or refund for
the first time (applied, needs_review, or stale), payments calls every subscriber registered for the
owner type of the attempt, *inside the transaction that recorded the fact*. A subscriber typically
calls ``workflow.kernel.apply`` on its own aggregate and returns the ``Outcome``; if it raises, the
whole classification rolls back (the webhook answers 5xx and the provider redelivers; an effect is
retried). Replays (``already_applied``) are not re-published: the subscriber already saw the fact.

    # orders/apps.py, in ready():
    from payments import hooks
    hooks.subscribe("orders.order", orders.services.order_on_payment_fact)

    def order_on_payment_fact(fact: hooks.PaymentFact) -> Outcome | None:
        order = Order.objects.get(pk=fact.owner_id)
        if fact.kind == "attempt" and fact.fact == "captured":
            return kernel.apply(order, "payment_captured", f"payment:{fact.identity}",
                                {"attempt_id": fact.attempt_id, "amount": fact.amount, ...}, actor=fact.actor)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from workflow.kernel import Outcome


@dataclasses.dataclass(frozen=True)
class PaymentFact:
    kind: str  # "attempt" | "refund"
    fact: str  # the event applied: authorized | captured | voided | failed | pending | succeeded | ...
    identity: (
        str  # the provider fact's identity, e.g. "pi_123:succeeded" (stable across webhook/effect/query)
    )
    result: str  # the payments machine's outcome: applied | needs_review | stale
    state: str  # the payments aggregate's state after classification
    attempt_id: int
    refund_id: int | None
    owner_type: str
    owner_id: str
    is_current_attempt: bool
    amount: int | None
    currency: str
    provider_object_id: str
    actor: str
    payload: dict[str, Any]


Subscriber = Callable[[PaymentFact], "Outcome | None"]

_subscribers: dict[str, list[Subscriber]] = {}


def subscribe(owner_type: str, subscriber: Subscriber) -> Subscriber:
    """Register ``subscriber`` for facts about attempts owned by ``owner_type`` (idempotent)."""
    registered = _subscribers.setdefault(owner_type, [])
    if all(
        getattr(s, "__qualname__", s) != getattr(subscriber, "__qualname__", subscriber)
        or getattr(s, "__module__", None) != getattr(subscriber, "__module__", None)
        for s in registered
    ):
        registered.append(subscriber)
    return subscriber


def unsubscribe(owner_type: str, subscriber: Subscriber) -> None:
    if subscriber in _subscribers.get(owner_type, []):
        _subscribers[owner_type].remove(subscriber)


def publish(fact: PaymentFact) -> list[dict[str, Any]]:
    """Run the owner's subscribers; answers what each one's ``apply`` said (for the webhook answer)."""
    answers = []
    for subscriber in list(_subscribers.get(fact.owner_type, [])):
        outcome = subscriber(fact)
        if outcome is not None:
            answers.append(
                {"subscriber": f"{subscriber.__module__}.{subscriber.__qualname__}", **outcome.as_dict()}
            )
    return answers

"""Outbox handlers for the work orders promise. Each runs inside the outbox item's transaction; what it
applies locally commits together with ``delivered``. Outside calls carry the item's effect key."""

from __future__ import annotations

from workflow import kernel
from workflow.outbox import effect_handler

from .models import Order
from .payment_port import get_port, payment_fact
from .services.reservations import reservations_commit, reservations_fulfill, reservations_release

ACTOR = "system:orders"


@effect_handler("orders.release_inventory", max_attempts=10)
def release_inventory(item) -> dict:
    return {"released": reservations_release(order_id=item.payload["order_id"], actor=ACTOR,
                                             reason="order promised inventory release")}


@effect_handler("orders.commit_inventory", max_attempts=10)
def commit_inventory(item) -> dict:
    return {"committed": reservations_commit(order_id=item.payload["order_id"], actor=ACTOR)}


@effect_handler("orders.fulfill_inventory", max_attempts=10)
def fulfill_inventory(item) -> dict:
    return {"fulfilled": reservations_fulfill(order_id=item.payload["order_id"], actor=ACTOR)}


@effect_handler("orders.warehouse_handoff", max_attempts=10)
def warehouse_handoff(item) -> dict:
    # The warehouse pulls paid orders through the API and answers with fulfillment_accepted; this
    # promise records that the handoff is owed (a push integration would call out here with item.effect_key).
    return {"handed_off": item.payload["order_id"]}


@effect_handler("orders.reservation_expired", max_attempts=10)
def reservation_expired(item) -> dict:
    outcome = kernel.apply((Order, item.payload["order_id"]), "reservation_expired",
                           f"reservation:{item.payload['reservation_id']}:expired",
                           {"reservation_id": item.payload["reservation_id"]}, actor=ACTOR)
    return outcome.as_dict()  # illegal is a fine answer: the order had moved on (paid, cancelling, …)


def _apply_attempt_answer(order_id: int, attempt_ref: str, answer: str) -> dict:
    """Turn a provider answer about an attempt into the fact it proves — unless the order already
    knows it (the capture webhook usually wins the race; its fact is recorded under the webhook's
    identity, and a second identity for the same fact would only add a misleading rejection)."""
    order = Order.objects.get(pk=order_id)
    if answer in ("already_captured", "captured"):
        if order.captured_attempt_ref == attempt_ref:
            return {"answer": answer, "already_recorded": True}
        status = get_port().attempt_status(attempt_ref=attempt_ref)
        return {"answer": answer, **payment_fact(order_id=order_id, fact="captured", attempt_ref=attempt_ref,
                                                 amount=status.amount, currency=status.currency,
                                                 capture_ref=status.capture_ref, actor=ACTOR).as_dict()}
    if answer in ("voided", "already_failed", "failed"):
        waiting = (Order.State.PAYMENT_PENDING, Order.State.CANCELLATION_PENDING)
        if order.current_attempt_ref != attempt_ref or order.state not in waiting:
            return {"answer": answer, "order_state": order.state, "applied_to_order": False}
        fact = "voided" if answer == "voided" else "failed"
        return {"answer": answer, **payment_fact(order_id=order_id, fact=fact, attempt_ref=attempt_ref,
                                                 actor=ACTOR).as_dict()}
    return {"answer": answer}


@effect_handler("orders.request_void", max_attempts=8)
def request_void(item) -> dict:
    """The void may race a capture: "already captured" is an answer, not an error (the capture fact
    then moves the order to refund_pending)."""
    p = item.payload
    answer = get_port().request_void(order_id=p["order_id"], attempt_ref=p["attempt_ref"],
                                     idempotency_key=item.effect_key)
    return _apply_attempt_answer(p["order_id"], p["attempt_ref"], answer)


@effect_handler("orders.resolve_cancellation", max_attempts=8)
def resolve_cancellation(item) -> dict:
    """Cancellation timed out: ask the provider, then decide from its answer (still authorized → void again)."""
    p = item.payload
    port = get_port()
    status = port.attempt_status(attempt_ref=p["attempt_ref"])
    if status.status in ("pending", "authorized"):
        answer = port.request_void(order_id=p["order_id"], attempt_ref=p["attempt_ref"],
                                   idempotency_key=f"void:{p['attempt_ref']}")
        return _apply_attempt_answer(p["order_id"], p["attempt_ref"], answer)
    return _apply_attempt_answer(p["order_id"], p["attempt_ref"], status.status)


@effect_handler("orders.request_refund", max_attempts=8)
def request_refund(item) -> dict:
    p = item.payload
    answer = get_port().request_refund(order_id=p["order_id"], attempt_ref=p["attempt_ref"],
                                       capture_ref=p["capture_ref"], amount=p["amount"], currency=p["currency"],
                                       idempotency_key=item.effect_key)
    status = answer.get("status")
    order = Order.objects.get(pk=p["order_id"])
    if order.refund_key != p["refund_key"] or order.state != Order.State.REFUND_PENDING:
        return {**answer, "order_state": order.state, "applied_to_order": False}
    if status == "succeeded":
        outcome = payment_fact(order_id=p["order_id"], fact="refund_succeeded", refund_key=p["refund_key"],
                               amount=p["amount"], refund_ref=answer.get("refund_ref", ""), actor=ACTOR)
        return {**answer, **outcome.as_dict()}
    if status == "failed":
        outcome = payment_fact(order_id=p["order_id"], fact="refund_failed", refund_key=p["refund_key"],
                               error=answer.get("error", "refund failed at the provider"), actor=ACTOR)
        return {**answer, **outcome.as_dict()}
    return answer  # pending: the refund's confirmation arrives later as a fact

"""What the sandbox does for each API call. Runs inside ``Ledger.transaction()``.

Each operation takes decoded form params and answers the Stripe-shaped object, or raises
``StripeError``. Events are produced with ``ledger.emit`` and delivered after commit.
"""

from __future__ import annotations

import time
from typing import Any

from .ledger import (
    CANCELABLE,
    DECLINES,
    PAYMENT_INTENT_CREATE_PARAMS,
    REFUND_CREATE_PARAMS,
    Ledger,
    StripeError,
    invalid,
    new_id,
    param_error,
)


def _unknown_params(params: dict[str, Any], allowed: set[str]) -> None:
    for name in params:
        if name not in allowed:
            raise param_error(f"Received unknown parameter: {name}", param=name, code="parameter_unknown")


def _int_param(params: dict[str, Any], name: str, *, required: bool) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        if required:
            raise param_error(f"Missing required param: {name}.", param=name, code="parameter_missing")
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise param_error(f"Invalid integer: {raw}", param=name, code="parameter_invalid_integer")
    if value < 1:
        raise param_error(
            "This value must be greater than or equal to 1.", param=name, code="parameter_invalid_integer"
        )
    return value


def _bool_param(params: dict[str, Any], name: str) -> bool:
    raw = params.get(name)
    if raw in (None, "", "false"):
        return False
    if raw == "true":
        return True
    raise param_error(f"Invalid boolean: {raw}", param=name)


def _metadata(params: dict[str, Any]) -> dict[str, str]:
    metadata = params.get("metadata") or {}
    if metadata == "":
        return {}
    if not isinstance(metadata, dict):
        raise param_error("Invalid object", param="metadata")
    return {str(k): str(v) for k, v in metadata.items()}


def _expect_status(intent: dict[str, Any], allowed: set[str], action: str) -> None:
    if intent["status"] not in allowed:
        raise invalid(
            f"You cannot {action} this PaymentIntent because it has a status of {intent['status']}.",
            code="payment_intent_unexpected_state",
            extra={"payment_intent": intent},
        )


# --- PaymentIntents -------------------------------------------------------------------------------
def payment_intent_create(ledger: Ledger, params: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    _unknown_params(params, PAYMENT_INTENT_CREATE_PARAMS)
    amount = _int_param(params, "amount", required=True)
    currency = (params.get("currency") or "").lower()
    if not currency:
        raise param_error("Missing required param: currency.", param="currency", code="parameter_missing")
    if len(currency) != 3 or not currency.isalpha():
        raise param_error(f"Invalid currency: {currency}.", param="currency", code="parameter_invalid_string")
    capture_method = params.get("capture_method") or "automatic"
    if capture_method not in ("automatic", "automatic_async", "manual"):
        raise param_error(f"Invalid capture_method: {capture_method}", param="capture_method")
    now = int(time.time())
    intent_id = new_id("pi")
    intent: dict[str, Any] = {
        "id": intent_id,
        "object": "payment_intent",
        "amount": amount,
        "amount_capturable": 0,
        "amount_received": 0,
        "canceled_at": None,
        "cancellation_reason": None,
        "capture_method": capture_method,
        "client_secret": f"{intent_id}_secret_{new_id('x', 16)[2:]}",
        "confirmation_method": "automatic",
        "created": now,
        "currency": currency,
        "description": params.get("description"),
        "last_payment_error": None,
        "latest_charge": None,
        "livemode": False,
        "metadata": _metadata(params),
        "payment_method": params.get("payment_method"),
        "payment_method_types": ["card"],
        "status": "requires_payment_method" if not params.get("payment_method") else "requires_confirmation",
    }
    ledger.put(intent)
    ledger.emit("payment_intent.created", intent, request)
    if _bool_param(params, "confirm"):
        intent = _confirm(ledger, intent, request)
    return intent


def payment_intent_confirm(
    ledger: Ledger, intent_id: str, params: dict[str, Any], request: dict[str, Any]
) -> dict[str, Any]:
    _unknown_params(params, {"payment_method", "expand", "return_url"})
    intent = ledger.get("payment_intent", intent_id, "intent")
    _expect_status(intent, {"requires_payment_method", "requires_confirmation"}, "confirm")
    if params.get("payment_method"):
        intent["payment_method"] = params["payment_method"]
    if not intent["payment_method"]:
        raise invalid(
            "You cannot confirm this PaymentIntent because it's missing a payment method.",
            code="payment_intent_unexpected_state",
            extra={"payment_intent": intent},
        )
    return _confirm(ledger, intent, request)


def _confirm(ledger: Ledger, intent: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """Authorize against the test card. A decline is a 402 card_error and leaves the intent retryable."""
    method = intent["payment_method"]
    if not method:
        raise invalid(
            "You cannot confirm this PaymentIntent because it's missing a payment method.",
            code="payment_intent_unexpected_state",
            extra={"payment_intent": intent},
        )
    now = int(time.time())
    charge = {
        "id": new_id("ch"),
        "object": "charge",
        "amount": intent["amount"],
        "amount_captured": 0,
        "amount_refunded": 0,
        "captured": False,
        "created": now,
        "currency": intent["currency"],
        "metadata": dict(intent["metadata"]),
        "paid": True,
        "payment_intent": intent["id"],
        "payment_method": method,
        "refunded": False,
        "status": "succeeded",
    }
    if method in DECLINES:
        code, decline_code, message = DECLINES[method]
        charge.update(status="failed", paid=False, failure_code=code, failure_message=message)
        ledger.put(charge, parent=intent["id"])
        error = {
            "type": "card_error",
            "code": code,
            "decline_code": decline_code,
            "message": message,
            "charge": charge["id"],
            "payment_method": {"id": method, "object": "payment_method"},
        }
        intent.update(status="requires_payment_method", latest_charge=charge["id"], last_payment_error=error)
        ledger.put(intent)
        ledger.emit("payment_intent.payment_failed", intent, request)
        raise StripeError(
            402,
            "card_error",
            message,
            code=code,
            commit=True,
            extra={"decline_code": decline_code, "charge": charge["id"], "payment_intent": intent},
        )
    ledger.put(charge, parent=intent["id"])
    intent["latest_charge"] = charge["id"]
    if intent["capture_method"] == "manual":
        intent.update(status="requires_capture", amount_capturable=intent["amount"])
        ledger.put(intent)
        ledger.emit("payment_intent.amount_capturable_updated", intent, request)
    else:
        charge.update(captured=True, amount_captured=intent["amount"])
        ledger.put(charge, parent=intent["id"])
        intent.update(status="succeeded", amount_received=intent["amount"])
        ledger.put(intent)
        ledger.emit("payment_intent.succeeded", intent, request)
    return intent


def payment_intent_retrieve(ledger: Ledger, intent_id: str) -> dict[str, Any]:
    return ledger.get("payment_intent", intent_id, "intent")


def payment_intent_capture(
    ledger: Ledger, intent_id: str, params: dict[str, Any], request: dict[str, Any]
) -> dict[str, Any]:
    _unknown_params(params, {"amount_to_capture", "expand", "metadata", "final_capture"})
    intent = ledger.get("payment_intent", intent_id, "intent")
    _expect_status(intent, {"requires_capture"}, "capture")
    amount = _int_param(params, "amount_to_capture", required=False) or intent["amount_capturable"]
    if amount > intent["amount_capturable"]:
        raise invalid(
            "The amount_to_capture must be less than or equal to the amount_capturable.",
            param="amount_to_capture",
            code="amount_too_large",
        )
    return _capture(ledger, intent, amount, request)


def _capture(ledger: Ledger, intent: dict[str, Any], amount: int, request: dict[str, Any]) -> dict[str, Any]:
    charge = ledger.get("charge", intent["latest_charge"], "charge")
    charge.update(captured=True, amount_captured=amount)
    ledger.put(charge, parent=intent["id"])
    intent.update(status="succeeded", amount_received=amount, amount_capturable=0)
    ledger.put(intent)
    ledger.emit("payment_intent.succeeded", intent, request)
    return intent


def payment_intent_cancel(
    ledger: Ledger,
    intent_id: str,
    params: dict[str, Any],
    request: dict[str, Any],
    *,
    capture_wins: bool = False,
) -> dict[str, Any]:
    """``capture_wins`` (a fault): the capture reached the provider just before this cancel did."""
    _unknown_params(params, {"cancellation_reason", "expand"})
    intent = ledger.get("payment_intent", intent_id, "intent")
    if capture_wins and intent["status"] == "requires_capture":
        intent = _capture(ledger, intent, intent["amount_capturable"], {"id": None, "idempotency_key": None})
        try:
            _expect_status(intent, CANCELABLE, "cancel")
        except StripeError as error:
            error.commit = True  # the racing capture stands
            raise
    _expect_status(intent, CANCELABLE, "cancel")
    reason = params.get("cancellation_reason") or None
    if reason not in (None, "duplicate", "fraudulent", "requested_by_customer", "abandoned"):
        raise param_error(f"Invalid cancellation_reason: {reason}", param="cancellation_reason")
    intent.update(
        status="canceled", canceled_at=int(time.time()), cancellation_reason=reason, amount_capturable=0
    )
    ledger.put(intent)
    ledger.emit("payment_intent.canceled", intent, request)
    return intent


def payment_intent_list(ledger: Ledger, params: dict[str, Any]) -> dict[str, Any]:
    return _list(ledger.all("payment_intent"), params, "/v1/payment_intents")


# --- Refunds --------------------------------------------------------------------------------------
def refund_create(
    ledger: Ledger, params: dict[str, Any], request: dict[str, Any], *, initial_status: str = "succeeded"
) -> dict[str, Any]:
    _unknown_params(params, REFUND_CREATE_PARAMS)
    if params.get("payment_intent"):
        intent = ledger.get("payment_intent", params["payment_intent"], "payment_intent")
        if intent["status"] != "succeeded" or not intent["latest_charge"]:
            raise invalid(
                f"This PaymentIntent ({intent['id']}) does not have a successful charge to refund.",
                param="payment_intent",
                code="charge_not_refundable"
                if intent["status"] == "canceled"
                else "payment_intent_unexpected_state",
            )
        charge = ledger.get("charge", intent["latest_charge"], "charge")
    elif params.get("charge"):
        charge = ledger.get("charge", params["charge"], "charge")
        intent = ledger.get("payment_intent", charge["payment_intent"], "payment_intent")
    else:
        raise param_error(
            "One of the following params should be provided for this request: payment_intent or charge.",
            code="parameter_missing",
        )
    remaining = charge["amount_captured"] - charge["amount_refunded"]
    if remaining <= 0:
        raise invalid(f"Charge {charge['id']} has already been refunded.", code="charge_already_refunded")
    amount = _int_param(params, "amount", required=False) or remaining
    if amount > remaining:
        raise invalid(
            f"Refund amount ({amount}) is greater than unrefunded amount on charge ({remaining}).",
            param="amount",
            code="amount_too_large",
        )
    reason = params.get("reason") or None
    if reason not in (None, "duplicate", "fraudulent", "requested_by_customer"):
        raise param_error(f"Invalid reason: {reason}", param="reason")
    refund = {
        "id": new_id("re"),
        "object": "refund",
        "amount": amount,
        "charge": charge["id"],
        "created": int(time.time()),
        "currency": charge["currency"],
        "metadata": _metadata(params),
        "payment_intent": intent["id"],
        "reason": reason,
        "status": initial_status,
    }
    ledger.put(refund, parent=intent["id"])
    # A pending refund already holds its amount against the charge, as Stripe's does.
    charge["amount_refunded"] += amount
    charge["refunded"] = charge["amount_refunded"] >= charge["amount_captured"]
    ledger.put(charge, parent=intent["id"])
    ledger.emit("refund.created", refund, request)
    if initial_status == "succeeded":
        ledger.emit("charge.refunded", charge, request)
    return refund


def refund_settle(ledger: Ledger, refund_id: str, status: str) -> dict[str, Any]:
    """Control: a pending refund reaches its final status (the bank answered)."""
    refund = ledger.get("refund", refund_id, "refund")
    if refund["status"] != "pending":
        raise invalid(f"Refund {refund_id} is {refund['status']}, not pending.")
    if status not in ("succeeded", "failed", "canceled"):
        raise invalid(f"Invalid status: {status}", param="status")
    refund["status"] = status
    charge = ledger.get("charge", refund["charge"], "charge")
    if status == "failed":
        refund["failure_reason"] = "declined"
    if status in ("failed", "canceled"):
        charge["amount_refunded"] -= refund["amount"]
        charge["refunded"] = False
        ledger.put(charge, parent=refund["payment_intent"])
    ledger.put(refund, parent=refund["payment_intent"])
    ledger.emit("refund.updated", refund)
    if status == "failed":
        ledger.emit("refund.failed", refund)
    elif status == "succeeded":
        ledger.emit("charge.refunded", charge)
    return refund


def refund_retrieve(ledger: Ledger, refund_id: str) -> dict[str, Any]:
    return ledger.get("refund", refund_id, "refund")


def refund_list(ledger: Ledger, params: dict[str, Any]) -> dict[str, Any]:
    parent = params.get("payment_intent") or None
    items = ledger.all("refund", parent=parent)
    if params.get("charge"):
        items = [r for r in items if r["charge"] == params["charge"]]
    return _list(
        items, {k: v for k, v in params.items() if k not in ("payment_intent", "charge")}, "/v1/refunds"
    )


def _list(items: list[dict[str, Any]], params: dict[str, Any], url: str) -> dict[str, Any]:
    """Stripe's cursor pagination: newest first, ``limit`` (1–100, default 10), ``starting_after``."""
    _unknown_params(params, {"limit", "starting_after", "ending_before", "created", "expand", "customer"})
    created = params.get("created")
    if isinstance(created, dict):
        for op, bound in created.items():
            bound = int(bound)
            items = [
                i
                for i in items
                if {
                    "gt": i["created"] > bound,
                    "gte": i["created"] >= bound,
                    "lt": i["created"] < bound,
                    "lte": i["created"] <= bound,
                }[op]
            ]
    elif created:
        items = [i for i in items if i["created"] == int(created)]
    limit = _int_param(params, "limit", required=False) or 10
    if limit > 100:
        raise param_error("This value must be less than or equal to 100.", param="limit")
    if params.get("starting_after"):
        ids = [i["id"] for i in items]
        if params["starting_after"] not in ids:
            raise invalid(
                f"No such object: '{params['starting_after']}'",
                param="starting_after",
                code="resource_missing",
                status=404,
            )
        items = items[ids.index(params["starting_after"]) + 1 :]
    page = items[:limit]
    return {"object": "list", "data": page, "has_more": len(items) > limit, "url": url}

"""The Stripe adapter, on the official SDK. Points at the sandbox provider with ``api_base``.

SDK retries are off: a retry decision belongs to the outbox (which knows the attempt count and asks
the provider first); a transport-level resend after a timeout is exactly the blind resend we forbid.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import stripe

from .base import (
    IdempotencyKeyReused,
    IntentResult,
    NotFoundAtProvider,
    OutcomeUnknown,
    PaymentDeclined,
    PermanentProviderError,
    ProviderError,
    RefundResult,
    UnexpectedProviderState,
)

T = TypeVar("T")

DEFAULT_TEST_PAYMENT_METHOD = "pm_card_visa"


class StripeProvider:
    name = "stripe"

    def __init__(
        self,
        *,
        api_key: str,
        api_base: str | None = None,
        timeout_seconds: float = 10.0,
        connect_timeout_seconds: float = 5.0,
        default_payment_method: str | None = DEFAULT_TEST_PAYMENT_METHOD,
    ) -> None:
        self.api_base = (api_base or stripe.DEFAULT_API_BASE).rstrip("/")
        self.default_payment_method = default_payment_method
        self.client = stripe.StripeClient(
            api_key,
            base_addresses={"api": self.api_base},
            max_network_retries=0,
            http_client=stripe.RequestsClient(timeout=(connect_timeout_seconds, timeout_seconds)),
        )

    # --- PaymentIntents -------------------------------------------------------------------------
    def create_intent(
        self,
        *,
        amount: int,
        currency: str,
        idempotency_key: str,
        metadata: dict[str, str],
        payment_method: str | None = None,
        description: str | None = None,
    ) -> IntentResult:
        """Create and confirm a manual-capture intent: ``requires_capture`` when authorized."""
        params: dict[str, Any] = {
            "amount": amount,
            "currency": currency.lower(),
            "capture_method": "manual",
            "confirm": True,
            "payment_method": payment_method or self.default_payment_method,
            "metadata": metadata,
            "payment_method_types": ["card"],
        }
        if description:
            params["description"] = description
        return self._call(
            lambda: self.client.v1.payment_intents.create(
                params=params, options={"idempotency_key": idempotency_key}
            ),
            IntentResult,
        )

    def retrieve_intent(self, intent_id: str) -> IntentResult:
        return self._call(lambda: self.client.v1.payment_intents.retrieve(intent_id), IntentResult)

    def capture_intent(
        self, intent_id: str, *, idempotency_key: str, amount: int | None = None
    ) -> IntentResult:
        params = {"amount_to_capture": amount} if amount is not None else {}
        return self._call(
            lambda: self.client.v1.payment_intents.capture(
                intent_id, params=params, options={"idempotency_key": idempotency_key}
            ),
            IntentResult,
        )

    def cancel_intent(
        self, intent_id: str, *, idempotency_key: str, reason: str | None = None
    ) -> IntentResult:
        params = {"cancellation_reason": reason} if reason else {}
        return self._call(
            lambda: self.client.v1.payment_intents.cancel(
                intent_id, params=params, options={"idempotency_key": idempotency_key}
            ),
            IntentResult,
        )

    def iter_intents(self, *, created_gte: int | None = None) -> Iterator[IntentResult]:
        params: dict[str, Any] = {"limit": 100}
        if created_gte is not None:
            params["created"] = {"gte": created_gte}
        while True:
            page = self._call(lambda p=dict(params): self.client.v1.payment_intents.list(params=p), None)
            for item in page.data:
                yield IntentResult.from_dict(item.to_dict())
            if not page.has_more or not page.data:
                return
            params["starting_after"] = page.data[-1].id

    # --- Refunds --------------------------------------------------------------------------------
    def create_refund(
        self,
        *,
        intent_id: str,
        idempotency_key: str,
        amount: int | None = None,
        metadata: dict[str, str] | None = None,
        reason: str | None = None,
    ) -> RefundResult:
        params: dict[str, Any] = {"payment_intent": intent_id, "metadata": metadata or {}}
        if amount is not None:
            params["amount"] = amount
        if reason:
            params["reason"] = reason
        return self._call(
            lambda: self.client.v1.refunds.create(
                params=params, options={"idempotency_key": idempotency_key}
            ),
            RefundResult,
        )

    def retrieve_refund(self, refund_id: str) -> RefundResult:
        return self._call(lambda: self.client.v1.refunds.retrieve(refund_id), RefundResult)

    def list_refunds(self, *, intent_id: str) -> list[RefundResult]:
        results: list[RefundResult] = []
        params: dict[str, Any] = {"payment_intent": intent_id, "limit": 100}
        while True:
            page = self._call(lambda p=dict(params): self.client.v1.refunds.list(params=p), None)
            results.extend(RefundResult.from_dict(item.to_dict()) for item in page.data)
            if not page.has_more or not page.data:
                return results
            params["starting_after"] = page.data[-1].id

    # --- error mapping --------------------------------------------------------------------------
    def _call(self, fn: Callable[[], Any], result_type: type[T] | None) -> Any:
        try:
            obj = fn()
        except stripe.StripeError as error:
            raise _classify(error) from error
        if result_type is None:
            return obj
        response = obj.last_response
        replayed = bool(response and response.headers.get("idempotent-replayed") == "true")
        return result_type.from_dict(obj.to_dict(), replayed=replayed)


def _error_body(error: stripe.StripeError) -> dict[str, Any]:
    body = error.json_body if isinstance(error.json_body, dict) else {}
    return body.get("error") or {}


def _classify(error: stripe.StripeError) -> ProviderError:
    body = _error_body(error)
    message = body.get("message") or str(error) or type(error).__name__
    code = body.get("code") or getattr(error, "code", None)
    kwargs = {"code": code, "http_status": error.http_status, "raw": body}
    intent_data = body.get("payment_intent")
    intent = IntentResult.from_dict(intent_data) if isinstance(intent_data, dict) else None
    if isinstance(error, stripe.APIConnectionError):
        return OutcomeUnknown(f"No answer from the provider: {message}", **kwargs)
    if isinstance(error, stripe.CardError):
        return PaymentDeclined(message, decline_code=body.get("decline_code"), intent=intent, **kwargs)
    if isinstance(error, stripe.IdempotencyError):
        return IdempotencyKeyReused(message, **kwargs)
    if isinstance(error, stripe.RateLimitError):
        return OutcomeUnknown(message, **kwargs)
    status = error.http_status or 0
    if status == 409 or status >= 500:  # still running under this key, or failed mid-way: ask, then decide
        return OutcomeUnknown(message, **kwargs)
    if status == 404 or code == "resource_missing":
        return NotFoundAtProvider(message, **kwargs)
    if code in ("payment_intent_unexpected_state", "charge_already_refunded", "charge_not_refundable"):
        return UnexpectedProviderState(message, intent=intent, **kwargs)
    return PermanentProviderError(message, **kwargs)

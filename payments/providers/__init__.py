"""Payment provider adapters. ``get_provider()`` answers the one configured by settings."""

from __future__ import annotations

import os

from .base import (
    IdempotencyKeyReused,
    IntentResult,
    NotFoundAtProvider,
    OutcomeUnknown,
    PaymentDeclined,
    PaymentProvider,
    PermanentProviderError,
    ProviderError,
    RefundResult,
    UnexpectedProviderState,
)

__all__ = [
    "IdempotencyKeyReused",
    "IntentResult",
    "NotFoundAtProvider",
    "OutcomeUnknown",
    "PaymentDeclined",
    "PaymentProvider",
    "PermanentProviderError",
    "ProviderError",
    "RefundResult",
    "UnexpectedProviderState",
    "get_provider",
    "set_provider_override",
]

_override: PaymentProvider | None = None


def set_provider_override(provider: PaymentProvider | None) -> None:
    """Tests point the app at a sandbox started on a free port; ``None`` restores settings."""
    global _override
    _override = provider


def get_provider() -> PaymentProvider:
    """The adapter for ``settings.PAYMENT_PROVIDER``: ``sandbox`` (→ STRIPE_API_BASE) or ``stripe``."""
    if _override is not None:
        return _override
    from django.conf import settings

    from .stripe_adapter import StripeProvider

    kind = getattr(settings, "PAYMENT_PROVIDER", "sandbox")
    timeout = float(getattr(settings, "STRIPE_TIMEOUT_SECONDS", 10))
    if kind == "sandbox":
        return StripeProvider(
            api_key=settings.STRIPE_API_KEY, api_base=settings.STRIPE_API_BASE, timeout_seconds=timeout
        )
    if kind == "stripe":
        # Real Stripe unless STRIPE_API_BASE is set explicitly (the settings default is the sandbox's URL).
        api_base = os.environ.get("STRIPE_API_BASE") or None
        return StripeProvider(
            api_key=settings.STRIPE_API_KEY,
            api_base=api_base,
            timeout_seconds=timeout,
            default_payment_method=None,
        )
    raise ValueError(f"Unknown PAYMENT_PROVIDER: {kind!r} (expected 'sandbox' or 'stripe')")

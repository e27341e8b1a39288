"""Payment provider adapters. ``get_provider()`` answers the one configured by settings."""

from __future__ import annotations

import functools
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
    """The adapter for ``settings.PAYMENT_PROVIDER``: ``sandbox`` (→ STRIPE_API_BASE) or ``stripe``.

    One adapter per configuration is kept, so its HTTP sessions (per thread) are reused.
    """
    if _override is not None:
        return _override
    from django.conf import settings

    kind = getattr(settings, "PAYMENT_PROVIDER", "sandbox")
    timeout = float(getattr(settings, "STRIPE_TIMEOUT_SECONDS", 10))
    if kind == "sandbox":
        api_base, default_method = settings.STRIPE_API_BASE, "pm_card_visa"
    elif kind == "stripe":
        # Real Stripe unless STRIPE_API_BASE is set explicitly (the settings default is the sandbox's URL).
        api_base, default_method = os.environ.get("STRIPE_API_BASE") or None, None
    else:
        raise ValueError(f"Unknown PAYMENT_PROVIDER: {kind!r} (expected 'sandbox' or 'stripe')")
    return _cached(kind, settings.STRIPE_API_KEY, api_base, timeout, default_method)


@functools.lru_cache(maxsize=8)
def _cached(kind: str, api_key: str, api_base: str | None, timeout: float, default_method: str | None):
    from .stripe_adapter import StripeProvider

    return StripeProvider(api_key=api_key, api_base=api_base, timeout_seconds=timeout,
                          default_payment_method=default_method)

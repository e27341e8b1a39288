"""Order and checkout policy knobs, read from Django settings with the defaults below.

Durations are seconds. They are read when used (not at import), so tests can override settings.
"""

from __future__ import annotations

from django.conf import settings

DEFAULTS = {
    # How long a reservation holds stock before it expires (bounds the whole checkout-to-payment window).
    "ORDERS_RESERVATION_TTL_SECONDS": 45 * 60,
    # payment_pending without a provider outcome for this long: the order cancels itself (void promised).
    "ORDERS_PAYMENT_TIMEOUT_SECONDS": 30 * 60,
    # payment_failed: how long the buyer may start a new attempt before the order is cancelled.
    "ORDERS_PAYMENT_RETRY_WINDOW_SECONDS": 30 * 60,
    # cancellation_pending: when to ask the provider what happened to the attempt, and how often.
    "ORDERS_CANCELLATION_QUERY_SECONDS": 120,
    "ORDERS_CANCELLATION_MAX_QUERIES": 5,
    # refund_pending: service target after which operators are flagged (the refund keeps running).
    "ORDERS_REFUND_TARGET_SECONDS": 24 * 3600,
    # refund_pending: inventory may stay reserved at most this long, then it is released anyway.
    "ORDERS_REFUND_INVENTORY_HOLD_SECONDS": 15 * 60,
    # checking_out carts older than this are reconciled (resumed or unwound).
    "ORDERS_CHECKOUT_GRACE_SECONDS": 5 * 60,
    # Capture discovered during cancellation: "auto_refund" or "manual_review".
    "ORDERS_CAPTURE_DURING_CANCELLATION": "auto_refund",
    # Captures at or above this amount (minor units) always go to manual_review during cancellation.
    "ORDERS_HIGH_VALUE_MINOR_UNITS": 100_000,
    # Dotted path of the PaymentPort implementation (orders.payment_port).
    "ORDERS_PAYMENT_PORT": "orders.payments_adapter.PaymentsAppPort",
}


def get(name: str):
    return getattr(settings, name, DEFAULTS[name])

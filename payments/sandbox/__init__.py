"""A Stripe-compatible sandbox payment provider that runs without Django.

It speaks the subset of Stripe's v1 API that ``payments.providers.stripe`` uses (PaymentIntents
create/retrieve/list/confirm/capture/cancel, Refunds create/retrieve/list), form-encoded in and
Stripe-shaped JSON out, honours ``Idempotency-Key`` the way Stripe does, keeps its own ledger in its
own SQLite file, delivers ``Stripe-Signature``-signed events to one webhook URL with retries, and can
be told to misbehave through ``/_sandbox/*`` control endpoints. Start it with
``python -m payments.sandbox --port 12111`` or ``python manage.py run_sandbox_provider``.
"""

from .server import SandboxServer, serve

__all__ = ["SandboxServer", "serve"]

"""Who may call a route, said by the view itself — for the routes whose rule cannot be read off their classes.

Most rules are derived from what a view already declares (DRF ``authentication_classes`` /
``permission_classes`` / ``required_scopes``, the station token class, the console's ``console_view``
decorator, the admin site's ``admin_view``). A view that lets everybody in (a health check, the signed
provider webhook, the API schema) says so explicitly with ``declare_access``; the access-matrix test
(tests/security/test_access_matrix.py) walks the URL conf and fails on any route without a rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PUBLIC = "public"  # anyone, no credential needed (liveness, readiness, the API schema and docs, the login page)
SIGNED_WEBHOOK = "signed_webhook"  # no credential; the body's signature (Stripe-Signature) is the authentication
RULES = (PUBLIC, SIGNED_WEBHOOK)

ACCESS_ATTRIBUTE = "access_rule"

# Views we do not own, declared by dotted path (the class or function the URL conf points at).
THIRD_PARTY: dict[str, str] = {
    "drf_spectacular.views.SpectacularAPIView": PUBLIC,
    "drf_spectacular.views.SpectacularSwaggerView": PUBLIC,
    "django.contrib.auth.views.LoginView": PUBLIC,
    "django.contrib.auth.views.LogoutView": PUBLIC,
}


def declare_access(rule: str, *, why: str) -> Callable[[Any], Any]:
    """Mark a view (function or class) with an explicit access rule; ``why`` is for the reader."""
    if rule not in RULES:
        raise ValueError(f"unknown access rule {rule!r}; one of {RULES}")

    def mark(view: Any) -> Any:
        setattr(view, ACCESS_ATTRIBUTE, rule)
        view.access_rule_why = why
        return view

    return mark


def declared_rule(callback: Any) -> str | None:
    """The rule a URL conf callback declares explicitly (on itself, its view class, or in THIRD_PARTY)."""
    view_class = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    for holder in (callback, view_class):
        if holder is not None and getattr(holder, ACCESS_ATTRIBUTE, None):
            return getattr(holder, ACCESS_ATTRIBUTE)
    target = view_class or callback
    dotted = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}"
    return THIRD_PARTY.get(dotted)

"""Console roles are Django groups: support reads everything, operator also repairs."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

SUPPORT = "support"
OPERATOR = "operator"
ROLES = (SUPPORT, OPERATOR)


def _groups(user) -> set[str]:
    cached = getattr(user, "_console_groups", None)
    if cached is None:
        cached = set(user.groups.values_list("name", flat=True))
        user._console_groups = cached
    return cached


def is_operator(user) -> bool:
    return bool(user and user.is_authenticated and user.is_active and (user.is_superuser or OPERATOR in _groups(user)))


def can_read(user) -> bool:
    return bool(user and user.is_authenticated and user.is_active and (user.is_superuser or _groups(user) & set(ROLES)))


def actor_for(user) -> str:
    """How the kernel records a console user: "user:<username>"."""
    return f"user:{user.get_username()}"


def console_view(*, operator: bool = False) -> Callable:
    """Login required (redirect), a console role required (403), the operator role for repairs (403).
    Checked before the view runs, for every method, so a forged POST is refused like a button click."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not can_read(request.user):
                raise PermissionDenied("This account has no console role.")
            if operator and not is_operator(request.user):
                raise PermissionDenied("Repairs need the operator role.")
            return view(request, *args, **kwargs)

        wrapped.console_operator_only = operator
        return wrapped

    return decorate

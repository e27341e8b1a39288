"""API-key authentication and scope checks for the integrator API.

``Authorization: Bearer lf_<prefix>_<secret>``. Keys are looked up by prefix and compared by SHA-256;
a view declares ``required_scopes`` (a string, or a dict from HTTP method to scope).
"""

from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions, permissions

from .models import ApiKey

# DRF expects request.user to answer is_authenticated.
ApiKey.is_authenticated = True  # type: ignore[attr-defined]
ApiKey.is_anonymous = False  # type: ignore[attr-defined]


def bearer_token(request) -> str | None:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise exceptions.AuthenticationFailed("Authorization must be 'Bearer <key>'.")
    return token.strip()


class ApiKeyAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        token = bearer_token(request)
        if token is None:
            return None
        parts = ApiKey.split(token)
        if parts is None:
            return None if token.startswith("st_") else self._fail()
        prefix, secret = parts
        key = ApiKey.objects.filter(prefix=prefix, active=True).first()
        if key is None or not key.matches(secret):
            self._fail()
        now = timezone.now()
        if key.last_used_at is None or (now - key.last_used_at).total_seconds() > 60:
            ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        return key, key

    @staticmethod
    def _fail():
        raise exceptions.AuthenticationFailed("Invalid API key.")

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="ledgerflow"'


class HasRequiredScopes(permissions.BasePermission):
    """Passes when the caller is an API key holding the view's scope for this method."""

    message = "This API key lacks the scope this operation needs."

    def has_permission(self, request, view) -> bool:
        principal = request.user
        if principal is None or not getattr(principal, "is_authenticated", False):
            raise exceptions.NotAuthenticated("Authentication credentials were not provided.")
        if not isinstance(principal, ApiKey):
            return False
        scope = required_scope(view, request.method)
        if scope is None:
            return True
        if not principal.has_scope(scope):
            self.message = f"This API key lacks the scope {scope!r}."
            return False
        return True


def required_scope(view, method: str) -> str | None:
    scopes = getattr(view, "required_scopes", None)
    if isinstance(scopes, dict):
        return scopes.get(method.upper())
    return scopes


def create_api_key(*, name: str, scopes: list[str]) -> tuple[ApiKey, str]:
    raw, prefix, digest = ApiKey.generate()
    key = ApiKey.objects.create(name=name, prefix=prefix, secret_hash=digest, scopes=sorted(set(scopes)))
    return key, raw


def actor_for(request) -> str:
    principal = getattr(request, "user", None)
    if isinstance(principal, ApiKey):
        return principal.actor
    return getattr(principal, "actor", None) or "anonymous"


from drf_spectacular.extensions import OpenApiAuthenticationExtension  # noqa: E402 - schema only


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI document describes integrator authentication (drf-spectacular could not guess it)."""

    target_class = "workflow.auth.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "API key `lf_<prefix>_<secret>` from `manage.py create_api_key`; each operation "
                               "needs its scope (see the operation's description)."}

"""Station authentication: ``Authorization: Bearer st_<prefix>_<secret>`` (not an API key).

Stations only reach the ``/api/v1/station/…`` views, and those accept nothing but a station token.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from workflow.auth import bearer_token

from .models import Station


class StationTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        token = bearer_token(request)
        if token is None:
            return None
        parts = Station.split_token(token)
        if parts is None:
            raise exceptions.AuthenticationFailed("Invalid station token.")
        prefix, secret = parts
        station = Station.objects.filter(prefix=prefix, active=True).first()
        if station is None or not station.matches(secret):
            raise exceptions.AuthenticationFailed("Invalid station token.")
        return station, station

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="ledgerflow-station"'


class IsStation(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:
        if not isinstance(request.user, Station):
            raise exceptions.NotAuthenticated("A station token is required.")
        return True


def create_station_token(*, name: str) -> tuple[Station, str]:
    """Test and command helper (the service does the work)."""
    from .services import station_create

    return station_create(name=name)


class StationTokenScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI document describes station authentication."""

    target_class = "printing.auth.StationTokenAuthentication"
    name = "stationToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "Station token `st_<prefix>_<secret>` from `manage.py create_station`."}

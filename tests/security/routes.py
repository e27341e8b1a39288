"""Every route of the URL conf, with a concrete path and the access rule its view declares.

The rule is READ from the view, never listed by hand here: a new endpoint whose view declares nothing
we understand makes ``route_rule`` raise, and the access-matrix test fails naming it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.urls.converters import IntConverter
from django.urls.resolvers import RegexPattern, RoutePattern
from rest_framework.views import APIView

from printing.auth import IsStation, StationTokenAuthentication
from workflow.access import PUBLIC, SIGNED_WEBHOOK, declared_rule
from workflow.auth import ApiKeyAuthentication, HasRequiredScopes

API_KEY = "api_key"
STATION = "station"
CONSOLE_READ = "console_read"
CONSOLE_OPERATOR = "console_operator"
ADMIN_STAFF = "admin_staff"

MISSING_ID = "987654321"
# Dummy values by parameter name: a missing object wherever the parameter names one; a real machine
# label for the console (so its object lookup, not the label, answers 404).
DUMMY_BY_NAME = {
    "label": "orders.order",
    "sku": "no-such-sku",
    "provider": "sandbox",
    "key": "no-such-repair",
    "slug": "no-such-page",
    "url": "no-such-admin-page/",
    "app_label": None,  # first alternative of the admin's regex
}
HANDLER_METHODS = ("get", "post", "put", "patch", "delete")


class UndeclaredAccess(Exception):
    pass


@dataclasses.dataclass
class Route:
    pattern: str  # the URL conf's pattern text, joined
    path: str  # a concrete path with dummy parameters
    callback: Any
    names_object: bool  # a path parameter identifies a stored object (the dummy one is missing)

    @property
    def view_class(self):
        return getattr(self.callback, "view_class", None) or getattr(self.callback, "cls", None)

    @property
    def is_api(self) -> bool:
        return self.path.startswith("/api/")


def _dummy_route_segment(pattern: RoutePattern) -> tuple[str, bool]:
    text = str(pattern)
    names_object = False
    for name, converter in pattern.converters.items():
        if isinstance(converter, IntConverter) or name in ("object_id", "id"):
            value = MISSING_ID
            names_object = True
        else:
            value = DUMMY_BY_NAME.get(name) or "no-such-thing"
            names_object = names_object or name == "sku"
        text = re.sub(rf"<(?:\w+:)?{name}>", value, text)
    return text, names_object


def _dummy_regex_segment(pattern: RegexPattern) -> tuple[str, bool]:
    regex = pattern._regex
    names_object = False

    def pick(match: re.Match) -> str:
        nonlocal names_object
        name, body = match.group(1), match.group(2)
        if re.fullmatch(r"[\w|-]+", body):  # alternatives of literals (the admin's app labels)
            return body.split("|")[0]
        if name in ("object_id", "content_type_id", "id"):
            names_object = True
            return MISSING_ID
        return DUMMY_BY_NAME.get(name) or "no-such-thing"

    text = re.sub(r"\(\?P<(\w+)>((?:[^()]|\([^()]*\))*)\)", pick, regex)
    text = text.lstrip("^").replace(r"\Z", "").rstrip("$").replace("\\", "")
    return text, names_object


def all_routes() -> list[Route]:
    routes: list[Route] = []

    def walk(resolver: URLResolver, pattern_prefix: str, path_prefix: str, names_object: bool) -> None:
        for entry in resolver.url_patterns:
            segment_builder = _dummy_route_segment if isinstance(entry.pattern, RoutePattern) else _dummy_regex_segment
            segment, names = segment_builder(entry.pattern)
            if isinstance(entry, URLResolver):
                walk(entry, pattern_prefix + str(entry.pattern), path_prefix + segment, names_object or names)
            elif isinstance(entry, URLPattern):
                routes.append(Route(pattern=pattern_prefix + str(entry.pattern), path="/" + path_prefix + segment,
                                    callback=entry.callback, names_object=names_object or names))

    walk(get_resolver(), "", "", False)
    for route in routes:  # the dummy path must reach the route it was built for
        match = resolve(route.path)
        assert match.func is route.callback, f"dummy path {route.path} of {route.pattern} resolves elsewhere"
    return routes


def methods_of(route: Route) -> list[str]:
    view_class = route.view_class
    if view_class is not None:
        return [m.upper() for m in HANDLER_METHODS if hasattr(view_class, m)]
    rule = route_rule(route)
    if rule == CONSOLE_OPERATOR:
        return ["GET", "POST"]
    return ["GET"]


def _is_exactly(classes, expected) -> bool:
    return [c if isinstance(c, type) else type(c) for c in classes] == list(expected)


def route_rule(route: Route) -> str:
    """The access rule the route's view declares; UndeclaredAccess when it declares none we understand."""
    declared = declared_rule(route.callback)
    if declared:
        return declared
    view_class = route.view_class
    if view_class is not None and issubclass(view_class, APIView):
        if _is_exactly(view_class.authentication_classes, [ApiKeyAuthentication]) and _is_exactly(
            view_class.permission_classes, [HasRequiredScopes]
        ):
            for method in methods_of(route):
                if api_scope(route, method) is None:
                    raise UndeclaredAccess(f"{route.pattern} {method}: an API-key view without required_scopes")
            return API_KEY
        if _is_exactly(view_class.authentication_classes, [StationTokenAuthentication]) and _is_exactly(
            view_class.permission_classes, [IsStation]
        ):
            return STATION
        raise UndeclaredAccess(f"{route.pattern}: DRF view with an authentication/permission pair nobody declared")
    if hasattr(route.callback, "console_operator_only"):
        return CONSOLE_OPERATOR if route.callback.console_operator_only else CONSOLE_READ
    if route.pattern in ("admin/login/", "admin/logout/"):
        return PUBLIC  # the admin's own sign-in and sign-out pages
    if getattr(route.callback, "admin_site", None) is not None or getattr(route.callback, "model_admin", None) \
            or _wrapped_by_admin_view(route.callback):
        # admin_view (the staff check) wraps every admin page; ModelAdmin pages apply it when called
        return ADMIN_STAFF
    if route.pattern.startswith("admin/"):
        return _admin_public_or_staff(route)
    raise UndeclaredAccess(f"{route.pattern}: {route.callback!r} declares no access rule")


def _wrapped_by_admin_view(callback, depth: int = 0) -> bool:
    """Is AdminSite.admin_view's ``inner`` (the staff check) somewhere in the decorator chain?"""
    if callback is None or depth > 6:
        return False
    code = getattr(callback, "__code__", None)
    if code is not None and code.co_qualname == "AdminSite.admin_view.<locals>.inner":
        return True
    cells = getattr(callback, "__closure__", None) or ()
    inner = [cell.cell_contents for cell in cells if callable(cell.cell_contents)]
    return any(_wrapped_by_admin_view(f, depth + 1) for f in [getattr(callback, "__wrapped__", None), *inner])


def _admin_public_or_staff(route: Route) -> str:
    """The admin site's own views outside ``admin_view``: its login/logout are public, the rest (the
    catch-all, the JS catalog) check staff themselves or serve nothing private."""
    name = getattr(route.callback, "__name__", "")
    if name in ("login", "logout", "i18n_javascript"):
        return PUBLIC
    if name == "catch_all_view":
        return ADMIN_STAFF
    raise UndeclaredAccess(f"{route.pattern}: admin view {name!r} without a rule")


def api_scope(route: Route, method: str) -> str | None:
    scopes = getattr(route.view_class, "required_scopes", None)
    if isinstance(scopes, dict):
        return scopes.get(method.upper())
    return scopes


__all__ = ["PUBLIC", "SIGNED_WEBHOOK", "Route", "all_routes", "methods_of", "route_rule", "api_scope"]

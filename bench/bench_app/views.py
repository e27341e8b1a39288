"""A webhook-shaped endpoint for the bench: Stripe-style signature over the raw body, then ``apply``.

It stands in for the payments webhook until that endpoint is on main (bench/subject.py switches the
HTTP case to the real one). Every classified answer is a 200 with the outcome body, as a provider
webhook must be acknowledged whatever the classification; only a bad signature is a 4xx.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from django.conf import settings
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from workflow.errors import SignatureInvalid, ValidationFailed


def sign(body: bytes, secret: str, timestamp: int) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def _verify(body: bytes, header: str) -> None:
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    timestamp, given = parts.get("t", ""), parts.get("v1", "")
    expected = sign(body, settings.BENCH_WEBHOOK_SECRET, int(timestamp or 0)).split("v1=", 1)[1]
    if not given or not hmac.compare_digest(given, expected):
        raise SignatureInvalid("bad signature")


class BenchOrderWebhookApi(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    def post(self, request):
        _verify(request.body, request.headers.get("Stripe-Signature", ""))
        event = json.loads(request.body)
        try:
            order_id, event_type, identity = int(event["order_id"]), event["type"], event["id"]
        except (KeyError, TypeError, ValueError):
            raise ValidationFailed("event needs order_id, type and id")
        from bench.subject import SUBJECT  # the bench order, or the real order with --subject order

        outcome = SUBJECT.apply(order_id, event_type, identity, event.get("data") or {})
        return Response(outcome.as_dict())

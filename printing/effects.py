"""Outbox handlers of the printing app (imported from PrintingConfig.ready)."""

from __future__ import annotations

import requests

from workflow import clock
from workflow.outbox import PermanentEffectError, RetryableEffectError, effect_handler

from . import conf
from .models import WebhookEndpoint
from .webhooks import EFFECT_TYPE, EVENT_ID_HEADER, SIGNATURE_HEADER, encode, sign


@effect_handler(EFFECT_TYPE, max_attempts=8, base_delay_seconds=5, max_delay_seconds=3600)
def deliver_webhook(item):
    """POST one signed event; any non-2xx answer or network error is retried with backoff."""
    endpoint = WebhookEndpoint.objects.filter(pk=item.payload["endpoint_id"]).first()
    if endpoint is None:
        raise PermanentEffectError(f"webhook endpoint {item.payload['endpoint_id']} no longer exists")
    if not endpoint.active:
        return {"skipped": "endpoint disabled"}
    body = encode(item.payload["event"])
    timestamp = int(clock.now().timestamp())
    headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(endpoint.secret, timestamp, body),
               EVENT_ID_HEADER: item.payload["event"]["id"], "User-Agent": "Ledgerflow-Webhooks/1"}
    try:
        response = requests.post(endpoint.url, data=body, headers=headers,
                                 timeout=float(conf.get("PRINT_WEBHOOK_TIMEOUT_SECONDS")), allow_redirects=False)
    except requests.RequestException as exc:
        raise RetryableEffectError(f"POST {endpoint.url} failed: {exc}") from exc
    if not 200 <= response.status_code < 300:
        raise RetryableEffectError(f"POST {endpoint.url} answered HTTP {response.status_code}: "
                                   f"{response.text[:300]}")
    return {"status": response.status_code, "event_id": item.payload["event"]["id"]}

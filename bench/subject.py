"""What the cases measure: one order-shaped machine, described once.

Every case reaches the machine only through ``SUBJECT``. Today that is the bench-only ``BenchOrder``
(bench/bench_app); when orders.Order is on main, add an ``ORDER = Subject(...)`` describing its forward
path and its service, and set ``SUBJECT = ORDER`` (and ``WEBHOOK`` to the payments endpoint).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Subject:
    label: str  # "app.model": the kernel's aggregate_type
    model_path: str  # "app.Model" for django.apps.get_model
    # The forward path: state -> (event that moves it on, next state). Terminal states are absent.
    forward: dict[str, tuple[str, str]]
    # The event that led into each state (seeded in the transition table, replayed by the cases).
    entered_by: dict[str, str]
    # How many of every 20 generated aggregates sit in each state ("spread over their states").
    spread: list[str]
    # Extra column values for generated rows (beyond the StateMachine columns).
    extra_columns: Callable[[int], dict[str, Any]]
    # The service a real caller uses: (order_id, event, identity, payload) -> Outcome.
    apply_path: str
    effect_suffix: dict[str, str]  # event -> outbox key suffix (the floor writes the same keys)

    def model(self):
        from django.apps import apps

        return apps.get_model(self.model_path)

    def apply(self, order_id: int, event: str, identity: str, payload: dict[str, Any]):
        from django.utils.module_loading import import_string

        return import_string(self.apply_path)(order_id=order_id, event_type=event, identity=identity, payload=payload)

    def state_of(self, order_id: int) -> str:
        """Generated aggregates are spread deterministically, so cases know states without a query."""
        return self.spread[order_id % len(self.spread)]

    @property
    def waiting_states(self) -> list[str]:
        return list(self.forward)


_P, _PAID, _FUL, _SHIP, _DEL, _CAN = (
    "payment_pending",
    "paid",
    "fulfillment_pending",
    "shipped",
    "delivered",
    "cancelled",
)

BENCH_ORDER = Subject(
    label="bench_app.benchorder",
    model_path="bench_app.BenchOrder",
    forward={
        _P: ("payment_captured", _PAID),
        _PAID: ("fulfillment_requested", _FUL),
        _FUL: ("shipped", _SHIP),
        _SHIP: ("delivery_confirmed", _DEL),
    },
    entered_by={
        _P: "created",
        _PAID: "payment_captured",
        _FUL: "fulfillment_requested",
        _SHIP: "shipped",
        _DEL: "delivery_confirmed",
        _CAN: "cancel",
    },
    spread=[_P] * 5 + [_PAID] * 4 + [_FUL] * 4 + [_SHIP] * 4 + [_DEL] * 2 + [_CAN],
    extra_columns=lambda i: {"reference": f"ord-{i}", "amount_cents": 1000 + i % 9000, "currency": "EUR"},
    apply_path="bench.bench_app.services.bench_order_apply_event",
    effect_suffix={
        "payment_captured": "receipt",
        "fulfillment_requested": "pick-list",
        "shipped": "shipping-mail",
        "delivery_confirmed": "review-request",
        "cancel": "release",
    },
)


def _order_warehouse_event(*, order_id: int, event_type: str, identity: str, payload: dict[str, Any]):
    from orders.services.orders import WAREHOUSE_EVENTS, order_apply_warehouse_event

    if event_type not in WAREHOUSE_EVENTS:
        # replays of seeded payment facts: in the product they arrive through the payments hook
        from orders.models import Order
        from workflow import kernel

        return kernel.apply((Order, order_id), event_type, identity, payload, actor="payments:bench")
    return order_apply_warehouse_event(
        order_id=order_id, event_type=event_type, identity=identity, payload=payload, actor="warehouse:bench"
    )


# The real order, on its warehouse path (paid -> fulfillment_pending -> shipped -> delivered, the events
# an integrator posts). Payment-side moves need attempts and provider facts: case 4 drives those.
ORDER = Subject(
    label="orders.order",
    model_path="orders.Order",
    forward={_PAID: ("fulfillment_accepted", _FUL), _FUL: ("shipped", _SHIP), _SHIP: ("delivery_confirmed", _DEL)},
    entered_by={
        _PAID: "payment_captured",
        _FUL: "fulfillment_accepted",
        _SHIP: "shipped",
        _DEL: "delivery_confirmed",
        _CAN: "cancel",
    },
    spread=[_PAID] * 6 + [_FUL] * 6 + [_SHIP] * 5 + [_DEL] * 2 + [_CAN],
    extra_columns=lambda i: {"currency": "EUR", "total_amount": 1000 + i % 9000},
    apply_path="bench.subject._order_warehouse_event",
    effect_suffix={
        "fulfillment_accepted": "fulfillment-accepted",
        "shipped": "fulfill-inventory",
        "delivery_confirmed": "delivered",
        "cancel": "release",
    },
)

SUBJECTS = {"bench_order": BENCH_ORDER, "order": ORDER}
# `python -m bench --subject order` (or BENCH_SUBJECT=order) measures the real Order instead.
SUBJECT = SUBJECTS[os.environ.get("BENCH_SUBJECT", "bench_order")]


# --- the HTTP case's bench target -------------------------------------------------------------------
# Case 4 measures the real payments webhook (bench/cases/http_payments.py) whenever its URL resolves, and
# this bench endpoint always: the kernel behind a signed webhook-style view, on the subject's machine.
@dataclasses.dataclass(frozen=True)
class Webhook:
    label: str
    path: str
    # (order_id, event, identity) -> (body bytes, headers)
    build: Callable[[int, str, str], tuple[bytes, dict[str, str]]]


def _bench_webhook_request(order_id: int, event: str, identity: str) -> tuple[bytes, dict[str, str]]:
    from bench.bench_app.views import sign

    body = json.dumps({"id": identity, "type": event, "order_id": order_id, "data": {}}).encode()
    ts = int(time.time())
    return body, {"Content-Type": "application/json", "Stripe-Signature": sign(body, "whsec_bench", ts)}


BENCH_WEBHOOK = Webhook(
    label="bench endpoint (signed webhook-style event -> apply on the subject)",
    path="/api/v1/bench-webhooks/orders",
    build=_bench_webhook_request,
)
WEBHOOK = BENCH_WEBHOOK


def payload_hash(event_type: str, payload: dict[str, Any]) -> str:
    """Same digest as workflow.kernel.payload_hash (kept import-free for the data generator)."""
    body = json.dumps(
        {"type": event_type, "payload": payload}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(body.encode()).hexdigest()

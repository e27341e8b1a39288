"""The orders app's small interface to payments, both directions.

Outbound (``PaymentPort``): what orders asks of payments — start an attempt, request a void, request a
refund keyed by the capture, ask what became of an attempt. The implementation is chosen by the
``ORDERS_PAYMENT_PORT`` setting.

Inbound (``payment_fact``): how payments tells an order that an attempt was captured, voided or failed,
or that a refund succeeded or failed. It turns the fact into one ``apply`` on the order with an
identity that names the fact (``payment:<attempt_ref>:captured``), so the same fact learnt twice —
from a webhook and from a provider query, say — is applied once.

``SimulatedPaymentPort`` is an in-process provider double honouring idempotency keys the way Stripe
does (same key → same answer, no second effect). It exists so orders can run before and without the
payments app's provider; it is not a payment provider.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from typing import Protocol

from django.utils.module_loading import import_string

from workflow import kernel

from . import conf


@dataclasses.dataclass(frozen=True)
class AttemptStarted:
    attempt_ref: str
    provider_ref: str
    attempt_id: int | None = None
    status: str = "pending"


@dataclasses.dataclass(frozen=True)
class AttemptStatus:
    """What the provider says about an attempt: pending | authorized | captured | voided | failed."""

    status: str
    amount: int | None = None
    currency: str = ""
    capture_ref: str = ""


class PaymentPort(Protocol):
    def start_attempt(self, *, order_id: int, amount: int, currency: str, idempotency_key: str) -> AttemptStarted:
        """Create the attempt and its provider intent. Same key → the same attempt."""

    def request_void(self, *, order_id: int, attempt_ref: str, idempotency_key: str) -> str:
        """Ask for a void. Answers ``voided`` (confirmed now), ``requested`` (a fact will follow),
        ``already_captured`` (the capture won the race) or ``already_failed``."""

    def request_refund(self, *, order_id: int, attempt_ref: str, capture_ref: str, amount: int, currency: str,
                       idempotency_key: str) -> dict:
        """Ask for a refund. Answers ``{"status": succeeded|pending|failed, "refund_ref": ...}``."""

    def attempt_status(self, *, attempt_ref: str) -> AttemptStatus:
        """Ask the provider (not our records) what became of the attempt."""

    def retry_refund(self, *, order_id: int, refund_key: str, actor: str, reason: str,
                     dry_run: bool = False) -> kernel.Outcome:
        """Operator repair: try a failed refund again (answers the outcome of that repair)."""


def get_port() -> PaymentPort:
    path = conf.get("ORDERS_PAYMENT_PORT")
    cls = import_string(path)
    return cls.instance() if hasattr(cls, "instance") else cls()


# --- inbound facts -------------------------------------------------------------------------------
FACT_EVENTS = {
    "captured": "payment_captured",
    "voided": "payment_voided",
    "failed": "payment_failed",
    "refund_succeeded": "refund_succeeded",
    "refund_failed": "refund_failed",
}


def fact_identity(fact: str, *, attempt_ref: str = "", refund_key: str = "") -> str:
    if fact.startswith("refund_"):
        return f"refund:{refund_key}:{fact.removeprefix('refund_')}"
    return f"payment:{attempt_ref}:{fact}"


def payment_fact(*, order_id: int, fact: str, attempt_ref: str = "", amount: int | None = None,
                 currency: str = "", capture_ref: str = "", refund_key: str = "", refund_ref: str = "",
                 error: str = "", identity: str | None = None, actor: str = "system:payments") -> kernel.Outcome:
    """Apply one payment fact to its order (the hook payments calls). Payload holds only the fact itself,
    never transport details, so every route to the same fact yields the same payload."""
    from .models import Order

    if fact not in FACT_EVENTS:
        raise ValueError(f"unknown payment fact {fact!r}")
    if fact.startswith("refund_"):
        payload = {"refund_key": refund_key, "amount": amount, "refund_ref": refund_ref}
        if fact == "refund_failed":
            payload = {"refund_key": refund_key, "error": error}
    elif fact == "captured":
        payload = {"attempt_ref": attempt_ref, "amount": amount, "currency": (currency or "").lower(),
                   "capture_ref": capture_ref or attempt_ref}
    else:
        payload = {"attempt_ref": attempt_ref}
    identity = identity or fact_identity(fact, attempt_ref=attempt_ref, refund_key=refund_key)
    return kernel.apply((Order, order_id), FACT_EVENTS[fact], identity, payload, actor=actor,
                        reason=f"payment fact: {fact}")


# --- the in-process double -------------------------------------------------------------------------
class SimulatedPaymentPort:
    """A provider double: attempts authorize at once; tests decide captures, failures and faults.

    Idempotency: every call's key is remembered with its answer, as a provider would, so a retried
    call never acts twice. ``refund_calls``/``void_calls`` count the effects actually performed.
    """

    _instance: SimulatedPaymentPort | None = None
    _instance_lock = threading.Lock()

    def __init__(self) -> None:
        self.reset()

    @classmethod
    def instance(cls) -> SimulatedPaymentPort:
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def reset(self) -> None:
        self._lock = threading.RLock()
        self._seq = itertools.count(1)
        self.attempts: dict[str, dict] = {}
        self.answers: dict[str, object] = {}
        self.refunds: dict[str, dict] = {}
        self.void_calls = 0
        self.refund_calls = 0
        # fault injection: exception to raise from the next start_attempt; refund outcome to give
        self.fail_next_start: Exception | None = None
        self.refund_outcome = "succeeded"
        self.crash_after_refund = False

    # test helpers: the provider's own decisions
    def capture(self, attempt_ref: str) -> None:
        with self._lock:
            self.attempts[attempt_ref]["status"] = "captured"

    def fail(self, attempt_ref: str) -> None:
        with self._lock:
            self.attempts[attempt_ref]["status"] = "failed"

    # the port
    def start_attempt(self, *, order_id: int, amount: int, currency: str, idempotency_key: str) -> AttemptStarted:
        with self._lock:
            if idempotency_key in self.answers:
                return self.answers[idempotency_key]
            if self.fail_next_start is not None:
                exc, self.fail_next_start = self.fail_next_start, None
                raise exc
            n = next(self._seq)
            ref = f"sim-pay-{order_id}-{n}"
            self.attempts[ref] = {"status": "authorized", "amount": amount, "currency": currency.lower(),
                                  "order_id": order_id}
            answer = AttemptStarted(attempt_ref=ref, provider_ref=f"pi_sim_{order_id}_{n}", status="authorized")
            self.answers[idempotency_key] = answer
            return answer

    def request_void(self, *, order_id: int, attempt_ref: str, idempotency_key: str) -> str:
        with self._lock:
            if idempotency_key in self.answers:
                return self.answers[idempotency_key]
            attempt = self.attempts.get(attempt_ref)
            if attempt is None:
                answer = "already_failed"
            elif attempt["status"] == "captured":
                answer = "already_captured"
            elif attempt["status"] == "failed":
                answer = "already_failed"
            else:
                attempt["status"] = "voided"
                self.void_calls += 1
                answer = "voided"
            self.answers[idempotency_key] = answer
            return answer

    def request_refund(self, *, order_id: int, attempt_ref: str, capture_ref: str, amount: int, currency: str,
                       idempotency_key: str) -> dict:
        with self._lock:
            if idempotency_key not in self.answers:
                self.refund_calls += 1
                ref = f"re_sim_{len(self.refunds) + 1}"
                self.refunds[ref] = {"capture_ref": capture_ref, "amount": amount, "status": self.refund_outcome}
                self.answers[idempotency_key] = {"status": self.refund_outcome, "refund_ref": ref}
            answer = dict(self.answers[idempotency_key])
        if self.crash_after_refund:
            self.crash_after_refund = False
            raise ConnectionError("worker lost the provider's answer after the refund was made")
        return answer

    def retry_refund(self, *, order_id: int, refund_key: str, actor: str, reason: str,
                     dry_run: bool = False) -> kernel.Outcome:
        from .models import Order

        order = Order.objects.get(pk=order_id)
        if dry_run:
            return kernel.apply(order, "refund_succeeded", "retry-preview", {"refund_key": refund_key,
                                "amount": order.captured_amount, "refund_ref": ""}, actor=actor, reason=reason,
                                dry_run=True)
        with self._lock:
            self.refund_calls += 1
            ref = f"re_sim_{len(self.refunds) + 1}"
            self.refunds[ref] = {"capture_ref": order.capture_ref, "amount": order.captured_amount,
                                 "status": self.refund_outcome}
            status = self.refund_outcome
        fact = "refund_succeeded" if status == "succeeded" else "refund_failed"
        return payment_fact(order_id=order_id, fact=fact, refund_key=refund_key, amount=order.captured_amount,
                            refund_ref=ref, error="declined again", actor=actor,
                            identity=f"refund:{refund_key}:{ref}:{status}")

    def attempt_status(self, *, attempt_ref: str) -> AttemptStatus:
        with self._lock:
            attempt = self.attempts.get(attempt_ref)
            if attempt is None:
                return AttemptStatus(status="failed")
            return AttemptStatus(status=attempt["status"], amount=attempt["amount"], currency=attempt["currency"],
                                 capture_ref=f"ch_{attempt_ref}" if attempt["status"] == "captured" else "")

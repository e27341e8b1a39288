"""Model-based protocol test over the real machines (hypothesis RuleBasedStateMachine).

Random interleavings over a few orders and print jobs of:

* commands: checkout, cancel, a new payment attempt after a failure, warehouse events; print job
  submit / cancel, station claims and reports (current or old lease, fresh or replayed event ids),
  a station's ledger replay;
* provider webhooks: any event the provider ever emitted, delivered again (duplicates), in any order
  (reordering, stale attempts), or altered to a wrong amount under a new event id;
* provider faults: the answer is dropped after the provider acted, a 500 before it acted, a capture
  that wins the race against a void, refunds that stay pending and settle later either way;
* worker crashes: the outbox handler raises before calling the provider, or after the provider acted
  (its local writes roll back, as when the process dies before commit);
* timers: the clock moves (``workflow.clock.travel``) and due timers fire;
* operator repairs: resolve reviews, retry refunds, requeue dead letters, reconcile with the
  provider and apply the proposed repairs, settle unknown print jobs.

The provider is the real sandbox (``payments.sandbox``) in a subprocess, spoken to over loopback HTTP
through the production adapter: its ledger is the independent witness of what was done outside.
Webhooks are not pushed by the sandbox (no URL configured): the test takes events from its ledger and
posts them, signed, to the real webhook endpoint, so it decides duplication and order.

After every step: the orders audit is clean, every row equals the replay of its history, every
recorded result is one of the six, at most one capture and one live refund per attempt at the
provider, no outbox promise delivered twice, no dead promise without its error, at most one usage
record per print job (only completed ones are billed).

``make test`` runs a small budget; ``make soak`` (HYPOTHESIS_PROFILE=soak) a longer search.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from django.db import transaction
from django.db.models import Count
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from orders.models import Order
from orders.selectors import invariant_violations
from orders.services import (
    cart_add_item,
    cart_create,
    checkout_place,
    order_apply_warehouse_event,
    order_cancel,
    order_resolve_review,
    order_retry_refund,
    order_start_payment_attempt,
    product_create,
)
from payments import reconciliation
from payments import services as payment_services
from payments.models import Discrepancy, PaymentAttempt, Refund
from printing import services as printing_services
from printing.models import PrintJob, UsageRecord
from workflow import clock, outbox, timers
from workflow.errors import LedgerflowError
from workflow.models import OutboxAttempt, OutboxItem, Transition
from workflow.selectors import all_history_mismatches

SIX = {"applied", "already_applied", "stale", "illegal", "conflict", "needs_review"}
OPERATOR = "user:prop-operator"

settings.register_profile("protocol", max_examples=8, stateful_step_count=60, deadline=None,
                          suppress_health_check=list(HealthCheck))
settings.register_profile("protocol-soak", max_examples=150, stateful_step_count=80, deadline=None,
                          suppress_health_check=list(HealthCheck))
PROFILE = "protocol-soak" if os.environ.get("HYPOTHESIS_PROFILE") == "soak" else "protocol"

# --- worker crashes around each side effect ------------------------------------------------------
REACHED: set[tuple[str, str, str]] = set()  # (machine, state, result) seen during the run: how deep it went
CRASH: dict[str, str] = {}  # {"plan": "before" | "after"}, consumed by the next handler call


class WorkerCrashed(Exception):
    """Stands for a worker process dying; the outbox sees an exception and rolls the handler back."""


def crashing(fn):
    def handler(item):
        plan = CRASH.pop("plan", "")
        if plan == "before":
            raise WorkerCrashed("worker died before the side effect")
        result = fn(item)
        if plan == "after":
            raise WorkerCrashed("worker died after the side effect, before commit")
        return result

    handler.__qualname__ = f"crashing({fn.__qualname__})"
    return handler


CRASHES = st.sampled_from(["", "", "", "", "before", "after"])
FAULTS = st.sampled_from([None, None, None, None, None, "drop_response", "error", "capture_wins"])


def sign(body: bytes, secret: str) -> str:
    t = int(clock.now().timestamp())
    return f"t={t},v1={hmac.new(secret.encode(), f'{t}.'.encode() + body, hashlib.sha256).hexdigest()}"


class ShopProtocol(RuleBasedStateMachine):
    sandbox = None  # the SandboxHandle, set by the test function

    def __init__(self) -> None:
        super().__init__()
        self.orders: list[int] = []
        self.jobs: list[int] = []
        self.offset = timedelta(0)
        self.base = timezone.now()
        self.counter = 0
        self.old_leases: dict[int, list[str]] = {}  # job -> lease tokens it ever had
        self.reports: list[tuple[int, dict]] = []  # (job, report) sent before
        self.products = []
        self.station = None
        self.provider_touched = False
        self.events: list[dict] = []  # the provider's events, as of its ledger's last reading
        self.pending_refunds: list[str] = []
        self.http = Client()

    def _exists(self, model, **filters) -> bool:
        with self._now():
            return model.objects.filter(**filters).exists()

    def _due(self) -> bool:
        with self._now():
            return OutboxItem.objects.filter(state__in=outbox.DUE_STATES, next_attempt_at__lte=clock.now()).exists()

    @contextlib.contextmanager
    def _now(self):
        # The clock is frozen at the example's start and moved only by the test: the same choices
        # replay to the same states (hypothesis needs that to shrink), and backoffs never become due
        # behind the test's back.
        with clock.freeze(self.base), clock.travel(self.offset):
            yield

    def _next(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}-{self.counter}"

    @initialize()
    def start(self) -> None:
        # Each example runs in a savepoint rolled back in teardown; the provider is reset.
        self._example = transaction.atomic()
        self._example.__enter__()
        CRASH.clear()
        self.sandbox.reset()
        tag = uuid.uuid4().hex[:8]
        self.products = [
            product_create(sku=f"MUG-{tag}", name="Mug", unit_price=2500, currency="usd", stock_on_hand=30),
            # two of these are a high-value order: a capture during cancellation goes to review
            product_create(sku=f"LAMP-{tag}", name="Lamp", unit_price=60000, currency="usd", stock_on_hand=5),
        ]
        self.station, _ = printing_services.station_create(name=f"station-{tag}")
        self.provider_touched = True
        self.events = []
        # Start with one order and one print job so every example has something to move.
        self.a_buyer_checks_out(product=0, quantity=1, card="")
        self.an_integrator_submits_a_print_job(expires=3600)

    def teardown(self) -> None:
        example = getattr(self, "_example", None)
        if example is not None:
            transaction.set_rollback(True)
            example.__exit__(None, None, None)

    # --- commands on orders ------------------------------------------------------------------------
    @precondition(lambda self: len(self.orders) < 4)
    @rule(product=st.integers(0, 1), quantity=st.integers(1, 2),
          card=st.sampled_from(["", "", "", "pm_card_chargeDeclined"]))
    def a_buyer_checks_out(self, product, quantity, card):
        with self._now():
            cart = cart_create(actor="buyer")
            cart_add_item(cart_id=cart.pk, sku=self.products[product].sku, quantity=quantity, actor="buyer")
            try:
                order = checkout_place(cart_id=cart.pk, checkout_key=self._next("checkout"), actor="buyer")
            except LedgerflowError:
                return  # e.g. out of stock: a clear refusal, everything compensated
        self.orders.append(order.pk)
        if card:  # the buyer's card declines (the attempt's payment method is plain data, not state)
            PaymentAttempt.objects.filter(pk=order.current_attempt_id).update(payment_method=card)

    @precondition(lambda self: self.orders)
    @rule(data=st.data())
    def a_buyer_cancels(self, data):
        order_id = data.draw(st.sampled_from(self.orders))
        with self._now():
            outcome = order_cancel(order_id=order_id, actor="buyer", reason="changed my mind")
        assert outcome.result in SIX

    @precondition(lambda self: self.orders and self._exists(Order, pk__in=self.orders, state="payment_failed"))
    @rule(data=st.data())
    def a_buyer_retries_payment(self, data):
        failed = list(Order.objects.filter(pk__in=self.orders, state="payment_failed").values_list("pk", flat=True))
        order_id = data.draw(st.sampled_from(failed or self.orders))
        with self._now():
            try:
                outcome = order_start_payment_attempt(order_id=order_id, idempotency_key=self._next("retry"),
                                                      actor="buyer")
            except LedgerflowError as refused:
                assert order_id not in failed or refused.code, refused
                return
        assert outcome.result in SIX

    @precondition(lambda self: self.orders)
    @rule(data=st.data())
    def the_warehouse_reports_again(self, data):
        self.the_warehouse_reports(data)

    @precondition(lambda self: self.orders)
    @rule(data=st.data())
    def the_warehouse_reports(self, data):
        order_id = data.draw(st.sampled_from(self.orders))
        order = Order.objects.get(pk=order_id)
        legal = [e for e in order.allowed_events() if e in ("fulfillment_accepted", "shipped", "delivery_confirmed")]
        event = data.draw(st.sampled_from(legal or ["fulfillment_accepted", "shipped", "delivery_confirmed"]))
        with self._now():
            outcome = order_apply_warehouse_event(order_id=order_id, event_type=event,
                                                  identity=self._next("warehouse"), payload={}, actor="warehouse")
        assert outcome.result in SIX

    # --- workers -----------------------------------------------------------------------------------
    def _deliver(self, item_id: int | None, crash: str, fault: str | None) -> str | None:
        """One worker delivery, possibly crashing around the side effect or meeting a provider fault."""
        if fault == "capture_wins":
            self.sandbox.fault("payment_intent.cancel", "capture_wins")
        elif fault == "error":
            self.sandbox.fault("*", "error", status=500)
        elif fault == "drop_response":
            self.sandbox.fault("*", "drop_response")
        if crash:
            CRASH["plan"] = crash
        self.provider_touched = True
        try:
            return outbox.deliver_one(item_id)
        finally:
            CRASH.clear()
            if fault:
                self.sandbox._control("DELETE", "faults")

    @precondition(lambda self: self._due())
    @rule(data=st.data(), crash=CRASHES, fault=FAULTS)
    def a_worker_delivers_one_item(self, data, crash, fault):
        with self._now():
            due = list(OutboxItem.objects.filter(state__in=outbox.DUE_STATES, next_attempt_at__lte=clock.now())
                       .order_by("id").values_list("pk", flat=True))
            if not due:
                return
            self._deliver(data.draw(st.sampled_from(due)), crash, fault)  # any due item: workers run out of order

    @precondition(lambda self: self._due())
    @rule(data=st.data())
    def workers_drain_the_backlog(self, data):
        """Deliver until nothing is due; each delivery may crash or meet a fault (retries go to later)."""
        with self._now():
            for _ in range(60):
                if self._deliver(None, data.draw(CRASHES), data.draw(FAULTS)) is None:
                    break

    @precondition(lambda self: self._due())
    @rule(data=st.data())
    def the_provider_stays_down_for_one_promise(self, data):
        """Every attempt of one promise fails before reaching the provider, through its backoffs, until
        it is dead (its error recorded): the dead-letter and requeue paths."""
        with self._now():
            due = list(OutboxItem.objects.filter(state__in=outbox.DUE_STATES, next_attempt_at__lte=clock.now())
                       .order_by("id").values_list("pk", flat=True))
        item_id = data.draw(st.sampled_from(due))
        for _ in range(30):
            with self._now():
                item = OutboxItem.objects.get(pk=item_id)
                if item.state not in outbox.DUE_STATES:
                    break
                wait = max(0.0, (item.next_attempt_at - clock.now()).total_seconds())
            self.offset += timedelta(seconds=wait)
            with self._now():
                self._deliver(item_id, "before", None)
        assert OutboxItem.objects.get(pk=item_id).state == "dead"

    # Hypothesis picks rules uniformly: the moves that push work forward get a second rule each, so the
    # search reaches the deep states (paid, shipped, refunds, reviews, completed prints) within budget.
    @precondition(lambda self: self._due())
    @rule(data=st.data())
    def workers_drain_the_backlog_again(self, data):
        self.workers_drain_the_backlog(data)

    @rule(step=st.sampled_from([30, 120, 900, 3600, 86400]))
    def time_passes_and_timers_fire(self, step):
        self.offset += timedelta(seconds=step)
        with self._now():
            for timer in timers.fire_due():
                assert timer.result in SIX | {"orphaned"}, timer.result

    # --- the provider ------------------------------------------------------------------------------
    @precondition(lambda self: self.events)
    @rule(data=st.data(), variant=st.sampled_from(["as_sent", "as_sent", "as_sent", "wrong_amount"]))
    def the_provider_sends_a_webhook(self, data, variant):
        event = data.draw(st.sampled_from(self.events))
        if variant == "wrong_amount":
            event = json.loads(json.dumps(event))
            event["id"] = f"evt_tampered_{self._next('evt')}"
            obj = event["data"]["object"]
            obj["amount"] = int(obj["amount"]) + 1
            if obj.get("amount_received"):
                obj["amount_received"] = int(obj["amount_received"]) + 1
        body = json.dumps(event).encode()
        with self._now():
            response = self.http.post("/api/v1/webhooks/payments/sandbox", body, content_type="application/json",
                                      HTTP_STRIPE_SIGNATURE=sign(body, self.sandbox.webhook_secret))
        assert response.status_code == 200, response.content
        answer = response.json()
        assert answer["result"] in SIX | {"ignored"}, answer
        for related in answer.get("related") or []:
            assert related.get("result") in SIX, answer

    @rule(status=st.sampled_from(["succeeded", "pending"]))
    def the_provider_changes_how_refunds_settle(self, status):
        self.sandbox.configure(refund_initial_status=status)

    @precondition(lambda self: self.pending_refunds)
    @rule(data=st.data(), status=st.sampled_from(["succeeded", "failed"]))
    def the_provider_settles_a_pending_refund(self, data, status):
        self.sandbox.settle_refund(data.draw(st.sampled_from(self.pending_refunds)), status)
        self.provider_touched = True

    # --- operators ---------------------------------------------------------------------------------
    @precondition(lambda self: self._exists(Order, pk__in=self.orders, state="manual_review")
                  or self._exists(PaymentAttempt, state="manual_review") or self._exists(Refund, state="manual_review"))
    @rule(data=st.data(), decision=st.sampled_from(["refund", "accept", "cancel"]))
    def an_operator_resolves_a_review(self, data, decision):
        orders = list(Order.objects.filter(pk__in=self.orders, state="manual_review").values_list("pk", flat=True))
        attempts = list(PaymentAttempt.objects.filter(state="manual_review").values_list("pk", flat=True))
        refunds = list(Refund.objects.filter(state="manual_review").values_list("pk", flat=True))
        with self._now():
            if orders:
                outcome = order_resolve_review(order_id=data.draw(st.sampled_from(orders)), decision=decision,
                                               actor=OPERATOR, reason="checked the provider dashboard")
                assert outcome.result in SIX
            if attempts:
                choice = data.draw(st.sampled_from(["authorized", "captured", "voided", "failed"]))
                outcome = payment_services.payment_attempt_resolve_review(
                    attempt_id=data.draw(st.sampled_from(attempts)), decision=choice, actor=OPERATOR,
                    reason="checked the provider dashboard")
                assert outcome.result in SIX
            if refunds:
                choice = data.draw(st.sampled_from(["succeeded", "failed"]))
                outcome = payment_services.refund_resolve_review(
                    refund_id=data.draw(st.sampled_from(refunds)), decision=choice, actor=OPERATOR,
                    reason="checked the provider dashboard")
                assert outcome.result in SIX

    @precondition(lambda self: self._exists(Order, pk__in=self.orders, state="refund_pending"))
    @rule(data=st.data())
    def an_operator_retries_a_refund(self, data):
        order_id = data.draw(st.sampled_from(
            list(Order.objects.filter(pk__in=self.orders, state="refund_pending").values_list("pk", flat=True))))
        with self._now():
            try:
                outcome = order_retry_refund(order_id=order_id, actor=OPERATOR, reason="buyer still owed")
            except LedgerflowError:
                return  # nothing to retry right now: a clear refusal
        assert outcome.result in SIX

    @precondition(lambda self: self._exists(OutboxItem, state="dead"))
    @rule()
    def an_operator_requeues_dead_letters(self):
        with self._now():
            for outcome in outbox.outbox_requeue_dead(actor=OPERATOR, reason="provider is back"):
                assert outcome.result in SIX

    @rule(repair=st.booleans())
    def reconciliation_runs_and_an_operator_repairs(self, repair):
        self.provider_touched = True
        with self._now():
            reconciliation.reconciliation_run(since_hours=24 * 3650, grace_seconds=0)
            if not repair:
                return
            for pk in Discrepancy.objects.filter(state="open").values_list("pk", flat=True):
                try:
                    result = reconciliation.discrepancy_repair(discrepancy_id=pk, actor=OPERATOR,
                                                               reason="reconciliation proposal checked")
                except LedgerflowError:
                    continue
                for outcome in (result.repair_outcome, result.discrepancy_outcome):
                    assert outcome is None or outcome.result in SIX

    # --- printing ----------------------------------------------------------------------------------
    @precondition(lambda self: len(self.jobs) < 4)
    @rule(expires=st.sampled_from([60, 3600]))
    def an_integrator_submits_a_print_job(self, expires):
        with self._now():
            job = printing_services.print_job_submit(
                data={"station_id": self.station.pk, "content_base64": "aGVsbG8=", "content_type": "text",
                      "expires_in_seconds": expires}, actor="integrator")
        self.jobs.append(job.pk)

    @precondition(lambda self: self._exists(PrintJob, pk__in=self.jobs, state="pending"))
    @rule(data=st.data())
    def an_integrator_cancels_a_print_job(self, data):
        with self._now():
            try:
                outcome = printing_services.print_job_cancel(job_id=data.draw(st.sampled_from(self.jobs)),
                                                             actor="integrator")
            except LedgerflowError:
                return  # not pending any more: 409
        assert outcome.result in SIX

    @precondition(lambda self: self._exists(PrintJob, pk__in=self.jobs, state="pending"))
    @rule()
    def the_station_claims(self):
        with self._now():
            job = printing_services.print_job_claim(station=self.station, wait_seconds=0)
        if job is not None:
            self.old_leases.setdefault(job.pk, []).append(job.lease_token)

    @precondition(lambda self: self.old_leases)
    @rule(data=st.data(), kind=st.sampled_from(["received", "printing", "completed", "completed", "failed",
                                                 "interrupted"]),
          lease=st.sampled_from(["current", "current", "current", "old"]))
    def the_station_reports(self, data, kind, lease):
        self._report(data, kind, lease)

    def _report(self, data, kind, lease):
        job_id = data.draw(st.sampled_from(sorted(self.old_leases)))
        tokens = self.old_leases[job_id]
        token = tokens[-1] if lease == "current" else data.draw(st.sampled_from(tokens))
        report = {"event_id": self._next("report"), "lease_token": token, "kind": kind}
        if kind in ("failed", "interrupted"):
            report["reason"] = "paper jam"
        with self._now():
            outcome = printing_services.print_job_report(station=self.station, job_id=job_id, report=report)
        assert outcome.result in SIX
        self.reports.append((job_id, report))

    @precondition(lambda self: self.old_leases)
    @rule(data=st.data(), kind=st.sampled_from(["received", "printing", "completed", "failed", "interrupted"]))
    def the_station_reports_on_its_current_lease(self, data, kind):
        self._report(data, kind, "current")

    @precondition(lambda self: self.reports)
    @rule(data=st.data())
    def the_station_replays_its_ledger(self, data):
        picked = data.draw(st.lists(st.sampled_from(self.reports), min_size=1, max_size=4))
        with self._now():
            results = printing_services.station_ledger_replay(
                station=self.station, entries=[{**report, "job_id": job_id} for job_id, report in picked])
        for result in results:
            assert result.get("result") in SIX, result

    @precondition(lambda self: self._exists(PrintJob, pk__in=self.jobs, state="unknown"))
    @rule(data=st.data(), outcome=st.sampled_from(["completed", "failed"]))
    def an_operator_settles_an_unknown_print_job(self, data, outcome):
        unknown = list(PrintJob.objects.filter(pk__in=self.jobs, state="unknown").values_list("pk", flat=True))
        if not unknown:
            return
        with self._now():
            answer = printing_services.print_job_settle(job_id=data.draw(st.sampled_from(unknown)), outcome=outcome,
                                                        actor=OPERATOR, reason="looked at the printer")
        assert answer.result in SIX

    # --- invariants --------------------------------------------------------------------------------
    @invariant()
    def the_audit_is_clean(self):
        if self.station is None:
            return
        REACHED.update(Transition.objects.filter(result__in=SIX).values_list("aggregate_type", "to_state", "result")
                       .distinct())
        # The audit's violations, less those a dead letter already hands to an operator: a cancelled
        # order whose release promise died keeps its hold until the requeue (kept by
        # test_a_dead_release_is_what_the_audit_reports_until_an_operator_requeues_it).
        dead_releases = set(OutboxItem.objects.filter(effect_type="orders.release_inventory", state="dead")
                            .values_list("aggregate_id", flat=True))
        assert [v for v in invariant_violations()
                if not (v.invariant == "cancelled_implies_no_live_reservation" and v.aggregate_id in dead_releases)
                ] == []
        assert all_history_mismatches() == []
        assert set(Transition.objects.values_list("result", flat=True).distinct()) <= SIX

    @invariant()
    def no_promise_delivered_twice_or_lost(self):
        if self.station is None:
            return
        twice = (OutboxAttempt.objects.filter(succeeded=True).values("item_id").annotate(n=Count("id"))
                 .filter(n__gt=1))
        assert not twice.exists(), list(twice)
        assert not OutboxItem.objects.filter(state="dead", last_error="").exists()
        assert not OutboxItem.objects.exclude(state__in=["pending", "retry_scheduled", "delivered", "dead"]).exists()

    @invariant()
    def at_most_one_capture_and_one_refund_per_attempt_at_the_provider(self):
        if self.station is None or not self.provider_touched:
            return  # only steps that could reach the provider read its ledger (it is the slow part)
        self.provider_touched = False
        ledger = self.sandbox.ledger()
        self.events = ledger["events"]
        self.pending_refunds = [r["id"] for r in ledger["refunds"] if r["status"] == "pending"]
        intents_per_attempt = Counter(i["metadata"].get("ledgerflow_attempt") for i in ledger["payment_intents"])
        assert all(n == 1 for n in intents_per_attempt.values()), intents_per_attempt
        captures = Counter(e["data"]["object"]["id"] for e in ledger["events"]
                           if e["type"] == "payment_intent.succeeded")
        assert all(n == 1 for n in captures.values()), captures
        live = Counter(r["payment_intent"] for r in ledger["refunds"] if r["status"] in ("pending", "succeeded"))
        assert all(n == 1 for n in live.values()), (live, ledger["refunds"])
        received = {i["id"]: i["amount_received"] for i in ledger["payment_intents"]}
        refunded = Counter()
        for r in ledger["refunds"]:
            if r["status"] == "succeeded":
                refunded[r["payment_intent"]] += r["amount"]
        assert all(amount <= received[intent] for intent, amount in refunded.items()), (refunded, received)

    @invariant()
    def only_completed_print_jobs_are_billed_once(self):
        if self.station is None:
            return
        billed = Counter(UsageRecord.objects.values_list("job_id", flat=True))
        assert all(n == 1 for n in billed.values()), billed
        assert not PrintJob.objects.filter(pk__in=list(billed)).exclude(state="completed").exists()


@pytest.fixture
def crashing_handlers():
    """Every registered outbox handler wrapped so a step can crash the worker around its side effect."""
    saved = dict(outbox._registry)
    for effect_type, config in saved.items():
        outbox._registry[effect_type] = outbox.EffectConfig(
            effect_type, crashing(config.handler), config.max_attempts, config.base_delay_seconds,
            config.max_delay_seconds)
    yield
    outbox._registry.clear()
    outbox._registry.update(saved)


@pytest.fixture
def payments_port(settings, sandbox):
    settings.ORDERS_PAYMENT_PORT = "orders.payments_adapter.PaymentsAppPort"
    return sandbox


@pytest.mark.django_db
def test_shop_protocol_model_based(payments_port, crashing_handlers):
    ShopProtocol.sandbox = payments_port
    ShopProtocol.TestCase.settings = settings.get_profile(PROFILE)
    REACHED.clear()
    ShopProtocol.TestCase("runTest").runTest()
    reached = sorted(REACHED)
    print(f"\nreached {len(reached)} (machine, state, result) triples:")
    for row in reached:
        print("  ", *row)

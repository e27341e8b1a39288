"""Model-based test of the kernel protocol (hypothesis RuleBasedStateMachine).

Random interleavings of: events with fresh or re-used identities (duplicates, reordering, changed
content), timer firings after the clock moves, outbox deliveries whose handler crashes before or
after the outside effect, and operator repairs. After every step the invariants hold:

* every answer is one of the six outcomes; a replayed identity gets the same answer as the first time
  (``already_applied`` for an applied one);
* the row equals the replay of its history, versions step by one;
* no effect is performed twice outside (the fake provider's ledger is keyed by the effect key);
* no outbox item is lost: each is pending, retrying, delivered or dead with its error.

The budget is small in ``make test``; ``HYPOTHESIS_PROFILE=soak`` runs a longer search.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.db import transaction
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.kernel_app.models import Parcel
from workflow import clock, kernel, outbox, timers
from workflow.models import OutboxItem, Transition
from workflow.selectors import history_mismatches

SIX = {"applied", "already_applied", "stale", "illegal", "conflict", "needs_review"}

settings.register_profile("default", max_examples=40, stateful_step_count=50, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("soak", max_examples=400, stateful_step_count=80, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")

# The "outside world": a provider that honours idempotency keys, like the sandbox. It performs the
# effect the first time it sees a key and only acknowledges repeats.
PERFORMED: dict[str, int] = {}  # effect key -> times the effect physically happened
REQUESTS: dict[str, int] = {}  # effect key -> times it was asked
CRASH_PLAN: list[str] = []  # "before" / "after" / "" consumed by the next delivery


def provider_effect(item):
    plan = CRASH_PLAN.pop(0) if CRASH_PLAN else ""
    if plan == "before":
        raise outbox.RetryableEffectError("connection reset before the provider acted")
    REQUESTS[item.effect_key] = REQUESTS.get(item.effect_key, 0) + 1
    if item.effect_key not in PERFORMED:
        PERFORMED[item.effect_key] = 1
    if plan == "after":
        raise outbox.RetryableEffectError("acknowledgement lost after the provider acted")
    return {"ok": True}


EVENTS = ["pack", "ship", "rebook", "deliver", "cancel", "route_to_review", "resolve", "abandon", "lost_in_transit"]


def payload_for(event: str, parcel: Parcel, draw_weight: int, booking: str) -> dict:
    if event == "pack":
        return {"weight_grams": draw_weight}
    if event == "ship":
        return {"weight_grams": draw_weight, "booking": booking}
    if event in ("rebook", "deliver"):
        return {"booking": booking}
    if event == "resolve":
        return {"decision": "ship" if draw_weight % 2 else "cancel"}
    return {}


class KernelProtocol(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.parcels: list[int] = []
        self.answers: dict[tuple[int, str], tuple[str, str, dict]] = {}  # (parcel, identity) -> (result, type, payload)
        self.counter = 0
        self.offset = timedelta(0)

    @initialize()
    def start(self) -> None:
        # Each example runs in a savepoint rolled back in teardown: examples never see each other's rows.
        self._example = transaction.atomic()
        self._example.__enter__()
        outbox.effect_handler("parcel.notify", max_attempts=3, replace=True)(provider_effect)
        PERFORMED.clear()
        REQUESTS.clear()
        CRASH_PLAN.clear()
        for _ in range(2):
            self.parcels.append(kernel.create(Parcel, actor="test", address="A", weight_grams=0).pk)

    def _now_travel(self):
        return clock.travel(self.offset)

    @precondition(lambda self: len(self.parcels) < 6)
    @rule()
    def a_new_parcel_arrives(self):
        with self._now_travel():
            self.parcels.append(kernel.create(Parcel, actor="test", address="A", weight_grams=0).pk)

    @rule(weight=st.sampled_from([100, 100, 250]), booking=st.sampled_from(["bk-1", "bk-2"]), data=st.data())
    def send_new_event(self, weight, booking, data):
        pk = data.draw(st.sampled_from(self.parcels))
        parcel = Parcel.objects.get(pk=pk)
        # Mostly events the state has a rule for (so the search goes deep), sometimes any event at all.
        legal = parcel.allowed_events()
        onward = [e for e in legal if e not in ("cancel", "abandon")]
        pick = data.draw(st.integers(0, 9))
        pool = (onward if onward and pick < 6 else legal if legal and pick < 9 else EVENTS)
        event = data.draw(st.sampled_from(pool))
        self.counter += 1
        identity = f"evt-{self.counter}"
        payload = payload_for(event, parcel, weight, booking)
        with self._now_travel():
            outcome = kernel.apply(parcel, event, identity, payload, actor="operator:prop", reason="model test")
        assert outcome.result in SIX
        assert outcome.result != "already_applied" and not outcome.replayed
        self.answers[(pk, identity)] = (outcome.result, event, payload)

    @precondition(lambda self: self.answers)
    @rule(data=st.data())
    def replay_an_earlier_event(self, data):
        (pk, identity), (result, event, payload) = data.draw(st.sampled_from(sorted(self.answers.items())))
        with self._now_travel():
            outcome = kernel.apply((Parcel, pk), event, identity, payload, actor="operator:prop", reason="again")
        expected = "already_applied" if result in ("applied", "needs_review") else result
        assert (outcome.result, outcome.replayed) == (expected, True), (identity, result, outcome)

    @precondition(lambda self: self.answers)
    @rule(data=st.data())
    def reuse_an_identity_with_other_content(self, data):
        (pk, identity), (result, event, payload) = data.draw(st.sampled_from(sorted(self.answers.items())))
        before = Parcel.objects.get(pk=pk)
        with self._now_travel():
            outcome = kernel.apply((Parcel, pk), event, identity, {**payload, "tampered": True})
        assert outcome.result == "conflict"
        after = Parcel.objects.get(pk=pk)
        assert (after.state, after.state_version) == (before.state, before.state_version)

    @rule(hours=st.integers(1, 30))
    def time_passes_and_timers_fire(self, hours):
        self.offset += timedelta(hours=hours)
        with self._now_travel():
            for timer in timers.fire_due():
                assert timer.result in SIX

    @rule(plan=st.sampled_from(["", "", "before", "after"]))
    def a_worker_delivers_one_item(self, plan):
        CRASH_PLAN[:] = [plan]
        with self._now_travel():
            outbox.deliver_one()
        CRASH_PLAN.clear()

    @rule()
    def an_operator_requeues_dead_items(self):
        with self._now_travel():
            outbox.outbox_requeue_dead(actor="operator:prop", reason="model test requeue")

    def teardown(self) -> None:
        example = getattr(self, "_example", None)
        if example is not None:
            transaction.set_rollback(True)
            example.__exit__(None, None, None)

    @invariant()
    def rows_equal_replayed_history(self):
        if self.parcels:
            assert history_mismatches(Parcel) == []
            assert history_mismatches(OutboxItem) == []

    @invariant()
    def no_effect_done_twice_and_none_lost(self):
        if not self.parcels:
            return
        assert all(count == 1 for count in PERFORMED.values()), PERFORMED
        delivered = set(OutboxItem.objects.filter(state="delivered").values_list("effect_key", flat=True))
        assert delivered <= set(PERFORMED)  # nothing marked delivered that did not happen
        # one promise per effect key, whatever was replayed or retried
        keys = list(OutboxItem.objects.values_list("effect_key", flat=True))
        assert len(keys) == len(set(keys))
        for item in OutboxItem.objects.all():
            assert item.state in ("pending", "retry_scheduled", "delivered", "dead")
            if item.state == "dead":
                assert item.last_error

    @invariant()
    def every_recorded_result_is_one_of_six(self):
        if not self.parcels:
            return
        assert set(Transition.objects.values_list("result", flat=True).distinct()) <= SIX


@pytest.mark.django_db
def test_kernel_protocol_model_based():
    try:
        KernelProtocol.TestCase.settings = settings.get_profile(PROFILE)
        KernelProtocol.TestCase("runTest").runTest()
    finally:
        from tests.kernel_app.apps import notify

        outbox.effect_handler("parcel.notify", max_attempts=5, replace=True)(notify)

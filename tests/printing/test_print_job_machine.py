"""The print job machine is exactly the seed's table: every (from, to) pair, legal and illegal.

The table in the seed (print-job-states) is data; here it is checked against the rules twice: from
their declarations, and by applying every event in every state and recording where the job went.
"""

from __future__ import annotations

import itertools

import pytest

from printing.models import SEED_TRANSITIONS, TERMINAL, PrintJob
from tests.machines import REGISTRY
from workflow import kernel

from . import samples  # noqa: F401  (registers the print job samples)

STATES = ["pending", "dispatching", "sent", "printing", "completed", "failed", "canceled", "expired", "unknown"]
SEED_TABLE = {
    "pending": {"dispatching", "canceled", "expired"},
    "dispatching": {"sent", "pending", "printing", "completed", "failed", "unknown"},
    "sent": {"printing", "completed", "failed", "unknown"},
    "printing": {"completed", "failed", "unknown"},
    "completed": set(),
    "failed": set(),
    "canceled": set(),
    "expired": set(),
    "unknown": {"completed", "failed"},
}


def declared_edges() -> set[tuple[str, str]]:
    edges = set()
    for rule in PrintJob.rules():
        for target in PrintJob.possible_targets(rule):
            edges.add((str(rule.source), str(target)))
    return edges


def test_the_states_and_the_terminal_set_are_the_seeds():
    assert PrintJob.all_states() == STATES
    assert set(TERMINAL) == set(PrintJob.TERMINAL_STATES) == {"completed", "failed", "canceled", "expired", "unknown"}
    assert {k: set(v) for k, v in SEED_TRANSITIONS.items()} == SEED_TABLE


@pytest.mark.parametrize(("source", "target"), list(itertools.product(STATES, STATES)),
                         ids=lambda s: s)
def test_every_pair_is_legal_exactly_when_the_seed_says_so(source, target):
    assert ((source, target) in declared_edges()) == (target in SEED_TABLE[source])


@pytest.mark.django_db
@pytest.mark.parametrize("source", STATES)
def test_applying_every_event_in_a_state_reaches_exactly_the_seeds_targets(source):
    # given a job in `source` for every event type of the machine
    build, payload = REGISTRY[PrintJob.aggregate_label()].build, REGISTRY[PrintJob.aggregate_label()].payload
    reached = set()
    for event in PrintJob.event_types():
        job = build(source)
        # when the event is applied (with facts that satisfy its guards)
        outcome = kernel.apply(job, event, f"pair:{event}", payload(event, job), actor="operator:test",
                               reason="pair test")
        # then it either moved along a seed edge or was refused as illegal, changing nothing
        if outcome.result == "applied":
            reached.add(outcome.state)
        else:
            assert outcome.result == "illegal", (event, outcome)
            job.refresh_from_db()
            assert job.state == source
    assert reached == SEED_TABLE[source]


@pytest.mark.django_db
def test_the_settle_repair_can_also_record_failed():
    job = REGISTRY[PrintJob.aggregate_label()].build("unknown")
    outcome = kernel.apply(job, "operator_settled", "settle:failed", {"outcome": "failed"},
                           actor="operator:ann", reason="label printer showed a jam, nothing printed")
    assert (outcome.result, outcome.state) == ("applied", "failed")
    assert job.failure_reason == "settled by an operator: label printer showed a jam, nothing printed"


def test_unknown_is_terminal_yet_settleable_and_the_dead_ends_have_no_way_out():
    assert "unknown" in TERMINAL
    assert {t for s, t in declared_edges() if s == "unknown"} == {"completed", "failed"}
    for dead_end in ("completed", "failed", "canceled", "expired"):
        assert not [e for e in declared_edges() if e[0] == dead_end], dead_end
        assert PrintJob.rule_for(dead_end, "station_completed") is None


def test_nothing_but_pending_can_be_canceled_or_expire_and_pending_cannot_fail():
    assert {s for s, t in declared_edges() if t in ("canceled", "expired")} == {"pending"}
    assert {t for s, t in declared_edges() if s == "pending"} == {"dispatching", "canceled", "expired"}

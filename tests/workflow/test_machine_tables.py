"""Every (state, event) pair of every machine, generated from the rules themselves.

Given an aggregate in each state and each event type of its machine:
legal pairs move to one of the rule's declared targets; every other pair is ``illegal`` and changes
nothing; terminal states are tested like the rest (their empty rows included). Also: every
non-terminal state declares how long it may wait and what happens then.
"""

from __future__ import annotations

import importlib
import pathlib

import pytest

from tests.machines import REGISTRY
from workflow import kernel
from workflow.machine import machines
from workflow.models import Transition

TESTS_DIR = pathlib.Path(__file__).resolve().parent.parent
for samples_file in sorted(TESTS_DIR.glob("*/samples.py")):
    importlib.import_module(f"tests.{samples_file.parent.name}.samples")


def _cells():
    for model in machines():
        for state in model.all_states():
            for event in model.event_types():
                yield pytest.param(model, state, event, id=f"{model.aggregate_label()}:{state}:{event}")


def test_every_machine_has_samples_for_the_table_test():
    missing = [m.aggregate_label() for m in machines() if m.aggregate_label() not in REGISTRY]
    assert not missing, f"add tests/<app>/samples.py entries for: {missing}"


@pytest.mark.django_db
@pytest.mark.parametrize(("model", "state", "event"), list(_cells()))
def test_state_event_cell(model, state, event):
    samples = REGISTRY[model.aggregate_label()]
    aggregate = samples.build(state)
    assert aggregate.state == state
    rule = model.rule_for(state, event)
    payload = samples.payload(event, aggregate)
    before_version = aggregate.state_version

    outcome = kernel.apply(aggregate, event, f"table:{event}", payload, actor=samples.actor, reason=samples.reason)

    if rule is None:
        assert outcome.result == "illegal", outcome
        assert aggregate.state == state and aggregate.state_version == before_version
    elif rule.custom.get("late_evidence"):  # a rule that exists to classify older news as stale (payments)
        assert outcome.result == "stale", outcome
        assert aggregate.state == state and aggregate.state_version == before_version
    else:
        assert outcome.result in ("applied", "needs_review"), outcome
        assert outcome.state in model.possible_targets(rule) or outcome.state == model.rule_for(
            state, model.REVIEW_EVENT or "").target, outcome
        assert aggregate.state_version == before_version + 1
    row = Transition.objects.get(pk=outcome.transition_id)
    assert (row.event_type, row.from_state, row.to_state, row.result) == (event, state, outcome.state, outcome.result)


@pytest.mark.parametrize("model", machines(), ids=lambda m: m.aggregate_label())
def test_every_non_terminal_state_declares_its_wait(model):
    undeclared = [s for s in model.non_terminal_states() if s not in model.WAIT_POLICIES]
    assert not undeclared, f"{model.aggregate_label()}: non-terminal states without a wait policy: {undeclared}"
    for state, policy in model.WAIT_POLICIES.items():
        assert state in model.all_states(), f"wait policy for unknown state {state!r}"
        if policy.timer_event:
            assert model.rule_for(state, policy.timer_event) is not None, (
                f"{model.aggregate_label()}: timer {policy.timer_event!r} has no rule from {state!r}")


@pytest.mark.parametrize("model", machines(), ids=lambda m: m.aggregate_label())
def test_terminal_states_are_declared_states(model):
    assert set(model.TERMINAL_STATES) <= set(model.all_states())

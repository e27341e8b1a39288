"""Registry of sample aggregates and event payloads, one entry per machine.

The generic table test (tests/workflow/test_machine_tables.py) walks every (state, event) pair of
every machine. For that it needs to build an aggregate in any state and a payload that satisfies
each rule's guards. Each app registers its machines in ``tests/<app>/samples.py``; a machine
without samples fails the table test, so a new machine cannot skip it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from workflow.machine import StateMachine


@dataclasses.dataclass
class MachineSamples:
    model: type[StateMachine]
    # Build (and save, via workflow.kernel.create) an aggregate sitting in ``state`` whose facts satisfy guards.
    build: Callable[[str], StateMachine]
    # Event type -> payload builder for an aggregate (defaults to an empty payload).
    payloads: dict[str, Callable[[StateMachine], dict[str, Any]]] = dataclasses.field(default_factory=dict)
    # Actor/reason used for repair rules.
    actor: str = "operator:table-test"
    reason: str = "table test"

    def payload(self, event: str, aggregate: StateMachine) -> dict[str, Any]:
        builder = self.payloads.get(event)
        return builder(aggregate) if builder else {}


REGISTRY: dict[str, MachineSamples] = {}


def register(samples: MachineSamples) -> MachineSamples:
    REGISTRY[samples.model.aggregate_label()] = samples
    return samples

"""Case 2: ``kernel.apply`` in-process, one Django connection per thread, through the subject's service."""

from __future__ import annotations

import random

from ..measure import Row, Worker, fill_latency, run_concurrent
from ..pools import AggregatePool
from ..subject import SUBJECT


class KernelWorker(Worker):
    def __init__(self, pool: AggregatePool, replay_fraction: float, seed: int) -> None:
        self.pool, self.replay_fraction = pool, replay_fraction
        self.rng = random.Random(seed)
        self.tag = random.randrange(1 << 30)

    def setup(self) -> None:
        from django.db import connection

        connection.ensure_connection()

    def op(self) -> str:
        if self.rng.random() < self.replay_fraction:
            order_id, event, identity = self.pool.replay_target(self.rng)
            outcome = SUBJECT.apply(order_id, event, identity, {})
            if outcome.result != "already_applied":
                raise AssertionError(f"replay of {identity} answered {outcome.result}")
            return "replay"
        order_id, state = self.pool.take()
        event, _ = SUBJECT.forward[state]
        outcome = SUBJECT.apply(order_id, event, f"kernel:{self.tag}:{order_id}:{event}", {})
        self.pool.give_back(order_id, outcome.state)
        if outcome.result != "applied":
            raise AssertionError(f"{event} on {order_id} in {state} answered {outcome.result}: {outcome.detail}")
        return "write"

    def teardown(self) -> None:
        from django.db import connection

        connection.close()


def run(
    pool: AggregatePool,
    *,
    concurrency: int,
    duration: float,
    replay_fraction: float,
    variant: str,
    case: str = "2 kernel",
) -> Row:
    seconds, latencies, kinds = run_concurrent(
        lambda n: KernelWorker(pool, replay_fraction, seed=1000 + n),
        concurrency=concurrency,
        duration=duration,
        warmup=min(1.0, duration / 5),
    )
    row = Row(
        case=case,
        variant=variant,
        concurrency=concurrency,
        ops=sum(kinds.values()),
        seconds=seconds,
        kinds=dict(kinds),
    )
    return fill_latency(row, latencies)

"""Case 3, the naive baseline: django-fsm method + ``save()`` + simple-history's post_save row +
``delay_on_commit``, under ``select_for_update`` (what a careful team writes by hand). No event
identities, no versioned update, no transition record, no durable outbox: the kernel's extra work
is what the ratio kernel/naive prices."""

from __future__ import annotations

from ..measure import Row, Worker, fill_latency, run_concurrent
from ..pools import AggregatePool
from ..subject import BENCH_ORDER


class NaiveWorker(Worker):
    def __init__(self, pool: AggregatePool) -> None:
        self.pool = pool

    def setup(self) -> None:
        from django.db import connection

        connection.ensure_connection()

    def op(self) -> str:
        from bench.bench_app.services import naive_order_transition

        order_id, state = self.pool.take()
        event, target = BENCH_ORDER.forward[state]  # the naive pattern has its own machine
        order = naive_order_transition(order_id=order_id, event_type=event)
        self.pool.give_back(order_id, order.state)
        return "write"

    def teardown(self) -> None:
        from django.db import connection

        connection.close()


def run(pool: AggregatePool, *, concurrency: int, duration: float) -> Row:
    seconds, latencies, kinds = run_concurrent(
        lambda n: NaiveWorker(pool), concurrency=concurrency, duration=duration, warmup=min(1.0, duration / 5)
    )
    row = Row(
        case="3 naive",
        variant="fsm+save+signal history+delay_on_commit",
        concurrency=concurrency,
        ops=sum(kinds.values()),
        seconds=seconds,
        kinds=dict(kinds),
    )
    return fill_latency(row, latencies)

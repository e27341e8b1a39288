"""A/B/C… in short alternating windows: every variant of a group sees the same load swings.

The machine is shared (other test suites run beside the bench), and its load moves by a factor of two
within a minute. Running variant A for 5 s and then B for 5 s compares two different minutes; running
A, B, A, B, A, B in 1.7 s windows compares the same minute. Each variant's windows are pooled.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

from .measure import Row, Worker, fill_latency, run_concurrent


@dataclasses.dataclass
class Variant:
    case: str
    variant: str
    make_worker: Callable[[int], Worker]
    # Entered around each window; may yield False to say "not available" (the variant is skipped).
    context: Callable[[], Any] = contextlib.nullcontext


def run_interleaved(
    variants: list[Variant], *, concurrency: int, duration: float, rounds: int = 3, warmup: float = 0.3
) -> list[Row]:
    window = duration / rounds
    seconds = [0.0] * len(variants)
    latencies: list[list[float]] = [[] for _ in variants]
    kinds = [Counter() for _ in variants]
    available = [True] * len(variants)
    for _ in range(rounds):
        for i, v in enumerate(variants):
            with v.context() as ok:
                if ok is False:
                    available[i] = False
                    continue
                s, lat, k = run_concurrent(
                    v.make_worker, concurrency=concurrency, duration=window, warmup=min(warmup, window / 3)
                )
            seconds[i] += s
            latencies[i] += lat
            kinds[i].update(k)
    rows = []
    for i, v in enumerate(variants):
        if not available[i]:
            continue
        row = Row(
            case=v.case,
            variant=v.variant,
            concurrency=concurrency,
            ops=sum(kinds[i].values()),
            seconds=seconds[i],
            kinds=dict(kinds[i]),
        )
        rows.append(fill_latency(row, latencies[i]))
    return rows

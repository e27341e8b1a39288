"""Running a loop at a given concurrency for a fixed time, and summarising what it did."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass
class Row:
    """One line of the table."""

    case: str
    variant: str
    concurrency: int
    ops: int = 0
    seconds: float = 0.0
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    baseline: str = ""
    ratio: float | None = None
    target: str = ""
    status: str = ""
    notes: str = ""
    kinds: dict[str, int] = dataclasses.field(default_factory=dict)
    throughput_override: float | None = None

    @property
    def throughput(self) -> float:
        if self.throughput_override is not None:
            return self.throughput_override
        return self.ops / self.seconds if self.seconds else 0.0

    @property
    def key(self) -> str:
        return f"{self.case}/{self.variant}/c{self.concurrency}"

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("throughput_override")
        d["throughput_per_s"] = round(self.throughput, 1)
        return d


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[k]


def fill_latency(row: Row, latencies_s: list[float]) -> Row:
    values = sorted(latencies_s)
    row.p50_ms, row.p95_ms, row.p99_ms = (
        None if (v := percentile(values, q)) is None else v * 1000 for q in (0.50, 0.95, 0.99)
    )
    return row


class Worker:
    """One thread's loop: ``setup`` once, ``op`` repeatedly (returns a kind label), ``teardown`` once."""

    def setup(self) -> None: ...

    def op(self) -> str:
        raise NotImplementedError

    def teardown(self) -> None: ...


def run_concurrent(
    make_worker: Callable[[int], Worker],
    *,
    concurrency: int,
    duration: float,
    max_ops: int | None = None,
    warmup: float = 0.0,
) -> tuple[float, list[float], Counter]:
    """Run ``concurrency`` threads for ``duration`` seconds (after ``warmup``); returns the measured
    wall time, every op's latency and the count of op kinds. An exception in a worker is re-raised."""
    barrier = threading.Barrier(concurrency + 1)
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    kinds: list[Counter] = [Counter() for _ in range(concurrency)]
    errors: list[BaseException] = []
    window: dict[str, float] = {}
    budget = {"left": max_ops if max_ops is not None else float("inf")}
    budget_lock = threading.Lock()
    go = threading.Event()

    def take() -> bool:
        with budget_lock:
            if budget["left"] <= 0:
                return False
            budget["left"] -= 1
            return True

    def body(n: int) -> None:
        worker = make_worker(n)
        try:
            worker.setup()
            barrier.wait()
            go.wait()
            warm_until = window["start"]
            while time.perf_counter() < warm_until and not errors:
                worker.op()
            end = window["end"]
            mine, count = latencies[n], kinds[n]
            while not errors:
                if time.perf_counter() >= end or not take():
                    break
                t0 = time.perf_counter()
                kind = worker.op()
                mine.append(time.perf_counter() - t0)
                count[kind] += 1
        except BaseException as exc:  # noqa: BLE001 - surfaced to the caller below
            errors.append(exc)
            barrier.abort()
            go.set()
        finally:
            try:
                worker.teardown()
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)

    threads = [threading.Thread(target=body, args=(n,), daemon=True) for n in range(concurrency)]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        barrier.wait()  # every worker is set up (connected) before the clock starts
    now = time.perf_counter()
    window["start"] = now + warmup
    window["end"] = now + warmup + duration
    go.set()
    window_start = window["start"]
    for t in threads:
        t.join()
    finished = time.perf_counter()
    if errors:
        raise errors[0]
    all_latencies = [v for per in latencies for v in per]
    total = Counter()
    for c in kinds:
        total.update(c)
    return max(1e-9, finished - window_start), all_latencies, total

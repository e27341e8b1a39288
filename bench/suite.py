"""The run: data preparation, the cases in order, ratios against the baselines of this same run."""

from __future__ import annotations

import contextlib
import json
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from . import db, report
from .measure import Row
from .pools import AggregatePool
from .subject import BENCH_ORDER, SUBJECT, WEBHOOK


class Suite:
    def __init__(
        self, *, plan, queue: str, broker_url: str, log: Callable[[str], None], output: Path, smoke: bool
    ) -> None:
        self.plan, self.queue, self.broker_url, self.log, self.output, self.smoke = (
            plan,
            queue,
            broker_url,
            log,
            output,
            smoke,
        )
        self.rows: list[Row] = []
        self.lines: list[str] = []  # "not yet" and other notes printed under the table
        self.conn = db.connect()
        self.pool: AggregatePool | None = None
        self.naive_pool: AggregatePool | None = None
        self.explain: dict[str, str] = {}

    # --- preparation ----------------------------------------------------------------------------
    def prepare_aggregates(self) -> None:
        if self.pool is not None:
            return
        n = self.plan.aggregates
        t0 = time.monotonic()
        db.reset_subject(self.conn)
        db.generate_aggregates(self.conn, 1, n)
        db.generate_naive(self.conn, n)
        db.analyze(self.conn)
        self.pool = AggregatePool(range(1, n + 1))
        self.naive_pool = AggregatePool(range(1, n + 1), subject=BENCH_ORDER)
        self.log(f"generated {n} {SUBJECT.label} + {n} naive orders with COPY in {time.monotonic() - t0:.1f}s")

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        p50 = f"{row.p50_ms:.2f}" if row.p50_ms is not None else "-"
        self.log(f"{row.key}: {row.throughput:.0f}/s p50 {p50} ms {row.kinds or ''} {row.notes}")
        return row

    def find(self, case: str, variant: str | None = None, concurrency: int | None = None) -> Row | None:
        for row in self.rows:
            if (
                row.case == case
                and (variant is None or row.variant == variant)
                and (concurrency is None or row.concurrency == concurrency)
            ):
                return row
        return None

    # --- the cases --------------------------------------------------------------------------------
    def run(self, cases: list[str]) -> None:
        if {"floor", "kernel", "naive", "http"} & set(cases):
            self.prepare_aggregates()
        if {"floor", "kernel", "naive"} & set(cases):
            self.run_transition_cases(cases)
        if "http" in cases:
            from .cases import floor

            # the floors the HTTP rows are read against, measured right before them
            for c in sorted({min(c, max(self.plan.concurrencies)) for c in self.plan.http_concurrencies}):
                self.add(floor.run(self.pool, concurrency=c, duration=self.plan.duration))
        if "http" in cases:
            from .cases import http

            for row in http.run(
                self.pool,
                concurrencies=self.plan.http_concurrencies,
                duration=self.plan.duration,
                log=self.log,
                conn=self.conn,
                attempts=self.plan.payment_attempts,
            ):
                self.add(row)
        if "outbox" in cases:
            from .cases import outbox

            for row in outbox.run(
                self.conn,
                backlog=self.plan.outbox_backlog,
                window=self.plan.drain_seconds,
                queue=self.queue,
                broker_url=self.broker_url,
                log=self.log,
            ):
                self.add(row)
        if "scale" in cases:
            from .cases import scale

            rows, explain = scale.run(
                self.conn,
                small=self.plan.scale_small,
                large=self.plan.scale_large,
                ops=self.plan.scale_ops,
                queries=self.plan.scale_queries,
                log=self.log,
            )
            self.explain.update(explain)
            for row in rows:
                self.add(row)
            self.pool = None  # scale emptied and refilled the tables
        if "printing" in cases:
            from .cases import printing

            rows, line = printing.run(
                self.conn,
                pollers=self.plan.print_pollers,
                jobs=self.plan.print_jobs,
                duration=self.plan.duration,
                log=self.log,
            )
            for row in rows:
                self.add(row)
            if line:
                self.lines.append(line)
        self.finish()

    def run_transition_cases(self, cases: list[str]) -> None:
        """Cases 1-3 as one interleaved group per concurrency: the floor, the kernel (with and without the
        broker push) and the naive baseline alternate in short windows, so every ratio compares the same
        minutes of a noisy machine."""
        from .cases import floor, kernel, naive
        from .interleave import Variant, run_interleaved
        from .switches import enqueue_on_commit

        table = SUBJECT.model()._meta.db_table
        for c in self.plan.concurrencies:
            group = [Variant("1 floor", "raw psycopg transition", lambda n: floor.FloorWorker(self.pool, table))]
            if "kernel" in cases:
                mixes = (
                    (self.plan.replay_fraction, f"{self.plan.replay_fraction:.0%} replays"),
                    (0.0, "writes only"),
                    (1.0, "replays only"),
                )
                for fraction, what in mixes:

                    def make(n, fraction=fraction):
                        return kernel.KernelWorker(self.pool, fraction, seed=1000 + n)

                    group.append(Variant("2 kernel", f"apply, {what}", make))

                def make_writer(n):
                    return kernel.KernelWorker(self.pool, 0.0, seed=2000 + n)

                def no_push():
                    return enqueue_on_commit(False)

                group.append(Variant("2 kernel", "apply, writes only, no broker push", make_writer, no_push))
            if "naive" in cases:
                group.append(
                    Variant(
                        "3 naive",
                        "fsm+save+signal history+delay_on_commit",
                        lambda n: naive.NaiveWorker(self.naive_pool),
                    )
                )
            rows = run_interleaved(group, concurrency=c, duration=self.plan.duration, rounds=self.plan.rounds)
            for row in rows:
                self.add(row)

    def finish(self) -> None:
        report.apply_ratios(self.rows, smoke=self.smoke)
        table = report.render(self.rows, self.lines)
        print(table)
        self.output.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "when": datetime.now(UTC).isoformat(),
            "host": platform.node(),
            "python": platform.python_version(),
            "subject": SUBJECT.label,
            "webhook": WEBHOOK.label,
            "smoke": self.smoke,
            "plan": {k: v for k, v in vars(self.plan).items()},
            "rows": [r.as_dict() for r in self.rows],
            "notes": self.lines,
        }
        self.output.write_text(json.dumps(body, indent=2, default=str))
        (self.output.parent / "latest.txt").write_text(table + "\n")
        for name, text in self.explain.items():
            (self.output.parent / f"explain_{name}.txt").write_text(text)
        self.log(f"wrote {self.output}")

    # --- profiling --------------------------------------------------------------------------------
    def profile(self, which: str) -> int:
        from pyinstrument import Profiler

        self.prepare_aggregates()
        # pyinstrument samples the thread that started it: run the op loop on this thread.
        from .cases import kernel, naive, outbox

        if which == "deliver":
            db.generate_outbox_backlog(self.conn, self.plan.outbox_backlog)
        worker = {
            "kernel": lambda: kernel.KernelWorker(self.pool, 0.0, seed=1),
            "naive": lambda: naive.NaiveWorker(self.naive_pool),
            "deliver": outbox.DeliverOneWorker,
        }[which]()
        worker.setup()
        for _ in range(50):  # warm caches and connections outside the profile
            worker.op()
        profiler = Profiler(interval=0.0005)
        ops = 0
        profiler.start()
        deadline = time.perf_counter() + self.plan.duration
        while time.perf_counter() < deadline:
            worker.op()
            ops += 1
        profiler.stop()
        worker.teardown()
        self.log(f"profiled {ops} {which} writes in {self.plan.duration:.0f}s ({ops / self.plan.duration:.0f}/s)")
        self.output.parent.mkdir(parents=True, exist_ok=True)
        text = profiler.output_text(unicode=False, color=False, show_all=False)
        path = self.output.parent / f"profile_{which}.txt"
        path.write_text(text)
        (self.output.parent / f"profile_{which}.html").write_text(profiler.output_html())
        print(text)
        self.log(f"wrote {path}")
        return 0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()

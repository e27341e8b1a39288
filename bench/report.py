"""Ratios against the baselines measured in the same run, the table, the targets of issue 7."""

from __future__ import annotations

import re

from .measure import Row


def _by(rows: list[Row], case: str, concurrency: int | None = None, variant: str | None = None) -> Row | None:
    for r in rows:
        if (
            r.case == case
            and (concurrency is None or r.concurrency == concurrency)
            and (variant is None or r.variant.startswith(variant))
        ):
            return r
    return None


def _floor_for(rows: list[Row], concurrency: int, before: Row | None = None) -> Row | None:
    """The floor measured closest before ``before`` (same group or the minutes just before it)."""
    upto = rows[: rows.index(before)] if before is not None and before in rows else rows
    floors = [r for r in upto if r.case == "1 floor"][::-1] or [r for r in rows if r.case == "1 floor"]
    exact = [r for r in floors if r.concurrency == concurrency]
    if exact:
        return exact[0]
    lower = [r for r in floors if r.concurrency <= concurrency]
    return max(lower, key=lambda r: r.concurrency) if lower else None


def _judge(
    row: Row,
    ratio: float | None,
    minimum: float | None = None,
    maximum: float | None = None,
    extra_ok: bool = True,
) -> None:
    row.ratio = ratio
    if minimum is not None:
        row.target = f">= {minimum:g}"
    if maximum is not None:
        row.target = f"<= {maximum:g}"
    if ratio is None:
        row.status = "n/a"
        return
    ok = extra_ok and (minimum is None or ratio >= minimum) and (maximum is None or ratio <= maximum)
    row.status = ("ok" if ok else "MISS") if row.target or not extra_ok else ""


def apply_ratios(rows: list[Row], *, smoke: bool = False) -> None:
    for row in rows:
        if row.case == "1 floor":
            row.baseline, row.ratio = "itself", 1.0
        elif row.case in ("2 kernel", "3 naive", "4 http"):
            floor = _floor_for(rows, row.concurrency, row)
            if floor is None:
                continue
            row.baseline = f"floor c{floor.concurrency}"
            ratio = row.throughput / floor.throughput if floor.throughput else None
            if row.case == "2 kernel" and "30%" in row.variant:
                _judge(row, ratio, minimum=0.5)
            elif row.case == "2 kernel" and "replays only" in row.variant:
                _judge(row, ratio, minimum=1.0)
            elif row.case == "4 http":
                non_2xx = row.kinds.get("non-2xx", 0)
                if row.concurrency == 8:
                    _judge(row, ratio, minimum=0.3, extra_ok=non_2xx == 0)
                else:
                    row.target, row.ratio = "0 non-2xx", ratio
                    row.status = "ok" if non_2xx == 0 else "MISS"
            else:
                row.ratio = ratio
            if row.case == "3 naive":
                kernel = _by(rows, "2 kernel", row.concurrency, "apply, writes only")
                if kernel and row.throughput:
                    row.notes = (
                        row.notes + f" kernel writes / naive = {kernel.throughput / row.throughput:.2f}"
                    ).strip()
        elif row.case == "7 print":
            floor = _floor_for(rows, row.concurrency, row)
            if floor is not None and floor.throughput:
                row.baseline, row.ratio = f"floor c{floor.concurrency}", row.throughput / floor.throughput
            doubles = sum(row.kinds.get(k, 0) for k in ("double_client", "double_db", "fenced_twice"))
            row.target = "0 leased twice, 0 non-2xx"
            row.status = "ok" if doubles == 0 and row.kinds.get("non-2xx", 0) == 0 else "MISS"
        elif row.case == "5 outbox" and row.variant.startswith("celery"):
            raw = _by(rows, "5 outbox", row.concurrency, "raw SKIP LOCKED")
            if raw is None:
                continue
            row.baseline = f"raw loop c{raw.concurrency}"
            ratio = row.throughput / raw.throughput if raw.throughput else None
            if row.concurrency == 2:
                _judge(row, ratio, minimum=0.5)
            else:
                row.ratio = ratio
        elif row.case == "5 outbox" and row.variant.startswith("raw"):
            row.baseline, row.ratio = "itself", 1.0
        elif row.case == "5 outbox":
            raw = _by(rows, "5 outbox", row.concurrency, "raw SKIP LOCKED")
            if raw is not None and raw.throughput:
                row.baseline, row.ratio = f"raw loop c{raw.concurrency}", row.throughput / raw.throughput
        elif row.case == "6 scale" and row.variant.endswith("(large)"):
            what = row.variant.split(" at ")[0]
            small = next(
                (
                    r
                    for r in rows
                    if r.case == "6 scale" and r.variant.startswith(what + " at ") and r.variant.endswith("(small)")
                ),
                None,
            )
            if small is None or not small.p50_ms:
                continue
            row.baseline = "same at small size (p50 latency)"
            ratio = row.p50_ms / small.p50_ms if row.p50_ms else None
            if "counts" in row.variant:
                row.ratio = ratio  # informational: a full count is O(n) by nature
            else:
                _judge(row, ratio, maximum=1.3)
            server, server_small = _server_ms(row.notes), _server_ms(small.notes)
            if server and server_small:
                row.notes = f"{row.notes}; server-side ratio {server / server_small:.2f}"
        elif row.case == "6 scale":
            row.baseline, row.ratio = "itself", 1.0


def _server_ms(notes: str) -> float | None:
    match = re.search(r"server execution ([0-9.]+) ms", notes or "")
    return float(match.group(1)) if match else None


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(rows: list[Row], lines: list[str]) -> str:
    header = [
        "case",
        "variant",
        "c",
        "ops",
        "ops/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "ratio",
        "baseline",
        "target",
        "ok",
    ]
    body = [
        [
            r.case,
            r.variant,
            str(r.concurrency),
            str(r.ops),
            _fmt(r.throughput, ".0f"),
            _fmt(r.p50_ms, ".2f"),
            _fmt(r.p95_ms, ".2f"),
            _fmt(r.p99_ms, ".2f"),
            _fmt(r.ratio, ".2f"),
            r.baseline,
            r.target,
            r.status,
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)]
    out = [
        " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
        "-+-".join("-" * w for w in widths),
    ]
    out += [" | ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)) for b in body]
    notes = [f"  {r.key}: {r.notes}" for r in rows if r.notes]
    if notes:
        out += ["", "notes:", *notes]
    if lines:
        out += ["", *lines]
    return "\n".join(out)

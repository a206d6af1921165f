"""Service levels (`"ttft_p95<=2s,tpot_p50<=60ms"`) and a benchmarked point's goodput under
them. Pure.

A level is `METRIC_pNN<=VALUE` with METRIC one of ttft, tpot, e2e (as `deskside bench`
defines them) and VALUE in s or ms. A cell (prompt length x concurrency) meets the SLA when
every level holds over its measured, successful requests, and none failed. A point's goodput
is the output tokens per second of the cells at the highest concurrency where every prompt
length meets the SLA (0 when none does)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from deskside.bench.metrics import percentile, request_metrics
from deskside.bench.models import CellResult
from deskside.errors import UsageError

METRICS = ("ttft", "tpot", "e2e")
LEVEL = re.compile(r"(ttft|tpot|e2e)_p(\d{1,2}(?:\.\d+)?)\s*(<=|<)\s*([0-9.]+)\s*(ms|s)")


@dataclass(frozen=True)
class Level:
    metric: str  # ttft | tpot | e2e
    q: float  # percentile, 0-100
    bound_s: float

    @property
    def text(self) -> str:
        return f"{self.metric}_p{self.q:g}<={self.bound_s:g}s"


def parse_sla(text: str) -> tuple[Level, ...]:
    levels = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = LEVEL.fullmatch(part)
        if m is None:
            raise UsageError(
                f"--sla: {part!r} is not a service level",
                hint="METRIC_pNN<=VALUE with METRIC ttft, tpot or e2e and VALUE in s or ms, "
                'e.g. "ttft_p95<=2s,tpot_p50<=60ms"',
            )
        metric, q, _, value, unit = m.groups()
        if not 0 < float(q) < 100:
            raise UsageError(f"--sla: percentile p{q} must be between p1 and p99")
        bound = float(value) / (1000 if unit == "ms" else 1)
        if bound <= 0:
            raise UsageError(f"--sla: {part!r}: the bound must be positive")
        levels.append(Level(metric, float(q), bound))
    if not levels:
        raise UsageError("--sla needs at least one level, e.g. ttft_p95<=2s")
    return tuple(levels)


@dataclass(frozen=True)
class CellVerdict:
    prompt_len: int
    concurrency: int
    met: bool
    observed: dict[str, float | None]  # level text -> the percentile measured
    output_tokens: int
    window_s: float | None
    failed: int


def judge_cell(cell: CellResult, levels: Sequence[Level]) -> CellVerdict:
    measured = [r for r in cell.requests if not r.warmup]
    ok = [m for r in measured if (m := request_metrics(r)) is not None]
    observed: dict[str, float | None] = {}
    met = bool(ok) and len(ok) == len(measured)
    for lv in levels:
        values = sorted(
            v
            for m in ok
            if (v := {"ttft": m.ttft_s, "tpot": m.tpot_s, "e2e": m.e2e_s}[lv.metric]) is not None
        )
        seen = percentile(values, lv.q) if values else None
        observed[lv.text] = seen
        if seen is not None and seen > lv.bound_s:
            met = False
    return CellVerdict(
        prompt_len=cell.prompt_len,
        concurrency=cell.concurrency,
        met=met,
        observed=observed,
        output_tokens=sum(m.output_tokens for m in ok),
        window_s=cell.metrics.window_s,
        failed=len(measured) - len(ok),
    )


def goodput(verdicts: Sequence[CellVerdict]) -> tuple[float, int | None]:
    """(output tok/s at the highest concurrency where every prompt length met the SLA,
    that concurrency); (0.0, None) when no concurrency did."""
    by_conc: dict[int, list[CellVerdict]] = {}
    for v in verdicts:
        by_conc.setdefault(v.concurrency, []).append(v)
    best: tuple[float, int | None] = (0.0, None)
    for conc in sorted(by_conc):
        cells = by_conc[conc]
        if not all(c.met for c in cells):
            continue
        window = sum(c.window_s or 0.0 for c in cells)
        tok_s = sum(c.output_tokens for c in cells) / window if window > 0 else 0.0
        best = (tok_s, conc)
    return best

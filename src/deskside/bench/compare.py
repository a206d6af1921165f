"""``deskside bench compare A B``: what got worse beyond noise, cell by cell.

For each cell present in both results and each headline metric, the change from A to B is
a *regression* (or an *improvement*) when it is in the bad (good) direction, larger than
``min_change`` relatively, and - where per-request samples exist - larger than
``z`` standard errors of the difference of means (Welch: sqrt(se_a^2 + se_b^2), each
se = sample standard deviation / sqrt(n)). Aggregate tok/s is one number per cell (one
window), so it has no noise estimate and only the relative threshold applies; the row
says so. A cell whose client was not reliable in either run is marked.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from deskside.bench.metrics import request_metrics
from deskside.bench.models import BenchResult, CellResult

Verdict = Literal["regression", "improvement", "within noise", "below threshold", "missing"]


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_len: int
    concurrency: int
    request_rate: float | None = None
    metric: str
    a: float | None
    b: float | None
    change: float | None = None
    z: float | None = None
    noise_estimate: bool = False
    verdict: Verdict
    note: str | None = None


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    a: str
    b: str
    min_change: float
    z_threshold: float
    rows: list[Row]

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == "regression"]


Samples = Callable[[CellResult], list[float]]


def _ok(cell: CellResult) -> list[float]:
    return []


def _ttft(cell: CellResult) -> list[float]:
    return [m.ttft_s for r in cell.requests if not r.warmup and (m := request_metrics(r))]


def _decode(cell: CellResult) -> list[float]:
    return [
        m.decode_tok_s
        for r in cell.requests
        if not r.warmup and (m := request_metrics(r)) and m.decode_tok_s is not None
    ]


def _prefill(cell: CellResult) -> list[float]:
    return [
        m.prefill_tok_s
        for r in cell.requests
        if not r.warmup and (m := request_metrics(r)) and m.prefill_tok_s is not None
    ]


# metric -> (value of a cell, per-request samples for the noise estimate, higher is better)
METRICS: dict[str, tuple[Callable[[CellResult], float | None], Samples, bool]] = {
    "ttft_s_mean": (lambda c: c.metrics.ttft_s.mean if c.metrics.ttft_s else None, _ttft, False),
    "decode_tok_s": (lambda c: c.metrics.decode_tok_s, _decode, True),
    "prefill_tok_s": (
        lambda c: c.metrics.prefill_tok_s if c.metrics.prefill_meaningful else None,
        _prefill,
        True,
    ),
    "aggregate_tok_s": (lambda c: c.metrics.aggregate_tok_s, _ok, True),
}


def _se(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    return statistics.stdev(values) / math.sqrt(len(values))


def compare(
    a: BenchResult,
    b: BenchResult,
    label_a: str = "A",
    label_b: str = "B",
    min_change: float = 0.05,
    z_threshold: float = 2.0,
) -> Comparison:
    rows: list[Row] = []
    keys = sorted(
        {(c.prompt_len, c.concurrency, c.request_rate) for c in [*a.cells, *b.cells]},
        key=lambda k: (k[0], k[2] is not None, k[2] or 0.0, k[1]),
    )
    for prompt_len, conc, rate in keys:
        ca, cb = a.cell(prompt_len, conc, rate), b.cell(prompt_len, conc, rate)
        if ca is None or cb is None:
            rows.append(
                Row(
                    prompt_len=prompt_len,
                    concurrency=conc,
                    request_rate=rate,
                    metric="cell",
                    a=None,
                    b=None,
                    verdict="missing",
                    note=f"only in {label_a if cb is None else label_b}",
                )
            )
            continue
        unreliable = [lbl for lbl, c in ((label_a, ca), (label_b, cb)) if not c.client.reliable]
        for metric, (value, samples, higher_better) in METRICS.items():
            va, vb = value(ca), value(cb)
            if va is None or vb is None:
                continue
            row = Row(
                prompt_len=prompt_len,
                concurrency=conc,
                request_rate=rate,
                metric=metric,
                a=va,
                b=vb,
                verdict="below threshold",
            )
            row.change = (vb - va) / va if va else None
            sa, sb = samples(ca), samples(cb)
            se_a, se_b = _se(sa), _se(sb)
            if se_a is not None and se_b is not None:
                row.noise_estimate = True
                spread = math.hypot(se_a, se_b)
                diff = statistics.fmean(sb) - statistics.fmean(sa)
                row.z = abs(diff) / spread if spread > 0 else math.inf
            worse = (vb < va) if higher_better else (vb > va)
            big = row.change is not None and abs(row.change) > min_change
            beyond_noise = row.z is None or row.z > z_threshold
            if big and beyond_noise:
                row.verdict = "regression" if worse else "improvement"
            elif big:
                row.verdict = "within noise"
            if not row.noise_estimate:
                row.note = "no noise estimate: relative threshold only"
            if unreliable:
                extra = f"client not reliable in {', '.join(unreliable)}"
                row.note = f"{row.note}; {extra}" if row.note else extra
            rows.append(row)
    return Comparison(
        a=label_a, b=label_b, min_change=min_change, z_threshold=z_threshold, rows=rows
    )

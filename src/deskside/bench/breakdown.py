"""A cell's figures broken down - pure functions over request records: how an open-loop
schedule was kept, goodput against objectives, per-turn and per-backend groups.

Only measured (non-warm-up) requests count. ``window`` for rates is first sent -> last
stream end, as for a cell's aggregate tok/s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from deskside.bench.arrivals import Arrivals, schedule_rate
from deskside.bench.metrics import RequestMetrics, request_metrics, stats
from deskside.bench.models import BackendStats, Goodput, OpenLoopStats, RequestRecord, TurnStats

UNKNOWN_BACKEND = "unknown"


def _measured(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if not r.warmup]


def _window(records: Sequence[RequestRecord]) -> float | None:
    ends = [r.sent_s + r.end_s for r in records if r.end_s is not None]
    if not records or not ends:
        return None
    span = max(ends) - min(r.sent_s for r in records)
    return span if span > 0 else None


def open_loop_stats(
    records: Sequence[RequestRecord],
    scheduled_s: Sequence[float],
    target_rate: float,
    arrivals: Arrivals,
    dropped: int,
    max_in_flight: int | None,
    peak_in_flight: int,
) -> OpenLoopStats:
    """``scheduled_s``: every due time of the schedule, dropped requests' included."""
    measured = _measured(records)
    ok = [r for r in measured if request_metrics(r) is not None]
    window = _window(measured)
    lags = [r.sent_s - r.scheduled_s for r in measured if r.scheduled_s is not None]
    return OpenLoopStats(
        target_rate=target_rate,
        arrivals=arrivals,
        scheduled=len(scheduled_s),
        scheduled_rate=schedule_rate(list(scheduled_s)),
        sent=len(measured),
        sent_rate=schedule_rate([r.sent_s for r in measured]),
        dropped=dropped,
        failed=len(measured) - len(ok),
        completed=len(ok),
        completed_rate=len(ok) / window if window else None,
        send_lag_s=stats(lags, "requests"),
        max_in_flight=max_in_flight,
        peak_in_flight=peak_in_flight,
    )


def meets(m: RequestMetrics, slo: dict[str, float]) -> bool:
    """Every objective set holds (TPOT: a one-token request has none and passes)."""
    if "ttft_s" in slo and m.ttft_s > slo["ttft_s"]:
        return False
    if "tpot_s" in slo and m.tpot_s is not None and m.tpot_s > slo["tpot_s"]:
        return False
    return not ("e2e_s" in slo and m.e2e_s > slo["e2e_s"])


def goodput(records: Sequence[RequestRecord], slo: dict[str, float]) -> Goodput:
    """Successful requests meeting every objective, per second of the window (and their
    output tokens per second)."""
    measured = _measured(records)
    good = [m for r in measured if (m := request_metrics(r)) is not None and meets(m, slo)]
    window = _window(measured)
    return Goodput(
        slo=dict(slo),
        met=len(good),
        requests=len(measured),
        requests_per_s=len(good) / window if window else None,
        output_tok_s=sum(m.output_tokens for m in good) / window if window else None,
    )


def backend_stats(records: Sequence[RequestRecord]) -> list[BackendStats]:
    """One group per backend a proxy named; requests it named none for: ``unknown``."""
    groups: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in _measured(records):
        groups[r.backend or UNKNOWN_BACKEND].append(r)
    out = []
    for name in sorted(groups):
        rs = groups[name]
        ok = [m for r in rs if (m := request_metrics(r)) is not None]
        out.append(
            BackendStats(
                backend=name,
                requests=len(rs),
                succeeded=len(ok),
                failed=len(rs) - len(ok),
                output_tokens=sum(m.output_tokens for m in ok),
                ttft_s=stats((m.ttft_s for m in ok), "requests"),
                e2e_s=stats((m.e2e_s for m in ok), "requests"),
            )
        )
    return out


def turn_stats(records: Sequence[RequestRecord]) -> list[TurnStats]:
    """One row per turn number (client side: usage counts and TTFT)."""
    by_turn: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in _measured(records):
        if r.turn is not None:
            by_turn[r.turn].append(r)
    out = []
    for turn in sorted(by_turn):
        rs = by_turn[turn]
        ok = [(r, m) for r in rs if (m := request_metrics(r)) is not None]
        reported = [r.cached_tokens for r, _ in ok if r.cached_tokens is not None]
        out.append(
            TurnStats(
                turn=turn,
                requests=len(rs),
                succeeded=len(ok),
                prompt_tokens=sum(r.prompt_tokens or 0 for r, _ in ok),
                cached_tokens=sum(reported) if reported else None,
                ttft_s=stats((m.ttft_s for _, m in ok), "requests"),
            )
        )
    return out

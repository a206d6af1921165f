"""Terminal tables for open-loop cells, multi-turn cells and the backends behind a proxy."""

from __future__ import annotations

from rich.table import Table

from deskside.bench.breakdown import UNKNOWN_BACKEND
from deskside.bench.models import BenchResult, Stats


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _p(s: Stats | None, q: str, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if s is None else f"{getattr(s, q) * scale:.{digits}f}"


def open_loop_table(result: BenchResult) -> Table | None:
    cells = [c for c in result.cells if c.open_loop is not None]
    if not cells:
        return None
    table = Table(
        title="Open loop: requests sent on schedule whatever the server does",
        caption=(
            "Sent: (n - 1) / span of the send times. Done: succeeded / (last end - first "
            "sent). Lag: actual - scheduled send. Goodput: successful requests meeting every "
            "objective set, per second."
        ),
        caption_justify="left",
    )
    for name in (
        "Prompt",
        "Target/s",
        "Sent/s",
        "Done/s",
        "Dropped",
        "Failed",
        "Lag p99 ms",
        "TTFT p50/p99 s",
        "TPOT p50/p99 ms",
        "Goodput/s",
    ):
        table.add_column(name, justify="right")
    for cell in cells:
        o, m = cell.open_loop, cell.metrics
        assert o is not None
        table.add_row(
            f"{cell.prompt_len:,}",
            f"{o.target_rate:g} {o.arrivals}",
            _num(o.sent_rate, 2),
            _num(o.completed_rate, 2),
            str(o.dropped),
            str(o.failed),
            _p(o.send_lag_s, "p99", 1e3, 1),
            f"{_p(m.ttft_s, 'p50')} / {_p(m.ttft_s, 'p99')}",
            f"{_p(m.tpot_s, 'p50', 1e3, 1)} / {_p(m.tpot_s, 'p99', 1e3, 1)}",
            _num(cell.goodput.requests_per_s, 2) if cell.goodput else "-",
        )
    return table


def turns_table(result: BenchResult) -> Table | None:
    cells = [c for c in result.cells if c.turns]
    if not cells:
        return None
    table = Table(
        title="Multi-turn: the prefix cache per turn",
        caption=(
            "Cached (usage): sum of usage.prompt_tokens_details.cached_tokens. Server hits / "
            "queries: prefix-cache counters' differences around the turn (tokens)."
        ),
        caption_justify="left",
    )
    for name in (
        "Prompt",
        "Conc.",
        "Turn",
        "OK",
        "Prompt tokens",
        "Cached (usage)",
        "Server hits",
        "Server queries",
        "Hit rate",
        "TTFT p50 s",
    ):
        table.add_column(name, justify="right")
    for cell in cells:
        for t in cell.turns:
            table.add_row(
                f"{cell.prompt_len:,}",
                str(cell.concurrency),
                str(t.turn),
                f"{t.succeeded}/{t.requests}",
                f"{t.prompt_tokens:,}",
                "-" if t.cached_tokens is None else f"{t.cached_tokens:,}",
                _num(t.server_prefix_hits, 0),
                _num(t.server_prefix_queries, 0),
                _pct(t.server_hit_rate),
                _p(t.ttft_s, "p50"),
            )
    return table


def backends_table(result: BenchResult) -> Table | None:
    """Shown only when a proxy named at least one backend."""
    cells = [c for c in result.cells if any(b.backend != UNKNOWN_BACKEND for b in c.backends)]
    if not cells:
        return None
    table = Table(title="Backends behind the proxy (from its response headers)")
    for name in ("Prompt", "Load", "Backend", "OK", "Output tokens", "TTFT p50 s", "E2E p50 s"):
        if name == "Backend":
            table.add_column(name, overflow="fold", min_width=20)
        else:
            table.add_column(name, justify="right")
    for cell in cells:
        for b in cell.backends:
            table.add_row(
                f"{cell.prompt_len:,}",
                cell.label,
                b.backend,
                f"{b.succeeded}/{b.requests}",
                f"{b.output_tokens:,}",
                _p(b.ttft_s, "p50"),
                _p(b.e2e_s, "p50"),
            )
    return table

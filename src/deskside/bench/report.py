"""Terminal report (rich): the benchmark table, the server's own figures, and what to doubt."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from deskside.bench.models import BenchResult, CellResult, ProbeResult, Stats
from deskside.bench.report_modes import backends_table, open_loop_table, turns_table


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def three(s: Stats | None, scale: float, digits: int) -> str:
    """p50 / p90 / p99 (n=...)."""
    if s is None:
        return "-"
    values = " / ".join(f"{v * scale:.{digits}f}" for v in (s.p50, s.p90, s.p99))
    return f"{values} (n={s.n})"


def matrix_table(result: BenchResult) -> Table:
    """Prompt | Concurrency | TTFT (s) | Prefill tok/s | Decode tok/s | Aggregate tok/s."""
    table = Table(
        title=f"deskside bench - {result.model} @ {result.url} ({result.endpoint})",
        caption=(
            "TTFT: median over the cell's successful requests. Prefill: apparent, "
            "(prompt - cached) / TTFT, meaningful at concurrency 1 (dimmed above it). "
            "Decode: per stream, sum(N_out - 1) / sum(E2E - TTFT). Aggregate: sum(N_out) / "
            "(last end - first sent). Concurrency N/s: open loop at N requests/s. "
            "! = see notes below."
        ),
        caption_justify="left",
    )
    for name in ("Prompt", "Concurrency", "TTFT (s)", "Prefill tok/s", "Decode tok/s"):
        table.add_column(name, justify="right")
    table.add_column("Aggregate tok/s", justify="right")
    table.add_column("OK", justify="right")
    table.add_column("", justify="left")
    for cell in result.cells:
        m = cell.metrics
        prefill = _num(m.prefill_tok_s, 0)
        if not m.prefill_meaningful and m.prefill_tok_s is not None:
            prefill = f"[dim]{prefill}[/]"
        table.add_row(
            f"{cell.prompt_len:,}",
            cell.label,
            _num(m.ttft_s.p50 if m.ttft_s else None, 2),
            prefill,
            _num(m.decode_tok_s, 1),
            _num(m.aggregate_tok_s, 1),
            f"{m.succeeded}/{m.requests}",
            "[yellow]![/]" if cell_flags(cell) else "",
        )
    return table


def detail_table(result: BenchResult) -> Table:
    """Distributions, each saying what it is over."""
    table = Table(title="Distributions (p50 / p90 / p99)")
    for name in (
        "Prompt",
        "Conc.",
        "TTFT s over requests",
        "TPOT ms over requests",
        "Inter-chunk gap ms over gaps",
        "Tokens/chunk",
        "Client CPU",
        "Loop lag p99 ms",
    ):
        table.add_column(name, justify="right")
    for cell in result.cells:
        m = cell.metrics
        table.add_row(
            f"{cell.prompt_len:,}",
            cell.label,
            three(m.ttft_s, 1, 3),
            three(m.tpot_s, 1e3, 1),
            three(m.chunk_gap_s, 1e3, 1),
            _num(m.tokens_per_chunk, 2),
            _pct(cell.client.cpu_fraction),
            _num(cell.client.loop_lag_p99_ms, 1),
        )
    return table


def server_table(result: BenchResult) -> Table | None:
    cells = [c for c in result.cells if c.server is not None and c.server.scraped]
    if not cells:
        return None
    table = Table(title="Server counters over each cell's window (/metrics differences)")
    for name in (
        "Prompt",
        "Conc.",
        "Gen tokens",
        "Prefix hit",
        "Preempt",
        "Queue ms",
        "Accept rate",
        "Mean accept len",
        "Per position %",
    ):
        table.add_column(name, justify="right")
    for cell in cells:
        w = cell.server
        assert w is not None
        spec = w.spec_decode
        per_pos = "-"
        if spec and spec.per_position:
            per_pos = "/".join(
                "-" if p.rate is None else f"{p.rate * 100:.0f}" for p in spec.per_position
            )
            per_pos += "%"
        table.add_row(
            f"{cell.prompt_len:,}",
            cell.label,
            _num(w.generation_tokens, 0),
            _pct(w.prefix_cache_hit_rate),
            _num(w.preemptions, 0),
            _num(w.queue_time_mean_s * 1e3 if w.queue_time_mean_s is not None else None, 1),
            _pct(spec.acceptance_rate) if spec else "-",
            _num(spec.mean_acceptance_length, 2) if spec else "-",
            per_pos,
        )
    return table


def cell_flags(cell: CellResult) -> list[str]:
    """Why a cell's figures deserve doubt (empty: none)."""
    flags = []
    m = cell.metrics
    where = f"{cell.prompt_len:,} x {cell.label}"
    if m.failed:
        kinds = ", ".join(f"{k} {v}" for k, v in m.errors.items())
        flags.append(f"{where}: {m.failed} of {m.requests} requests failed ({kinds})")
    o = cell.open_loop
    if o is not None and o.dropped:
        flags.append(
            f"{where}: {o.dropped} of {o.scheduled} requests dropped (max in flight "
            f"{o.max_in_flight} reached)"
        )
    if o is not None and o.send_lag_s is not None and o.send_lag_s.p99 > 0.05:
        flags.append(
            f"{where}: requests left up to {o.send_lag_s.max * 1e3:.0f} ms after their "
            "scheduled time (p99 over 50 ms): the client did not keep the schedule"
        )
    if not cell.client.reliable:
        flags.append(f"{where}: client may be the bottleneck - " + "; ".join(cell.client.reasons))
    if m.prompt_tokens_exact is False:
        flags.append(f"{where}: the server counted prompts of a different length than targeted")
    if cell.server is not None:
        if not cell.server.scraped:
            flags.append(f"{where}: /metrics not scraped ({cell.server.error})")
        flags.extend(f"{where}: {note}" for note in cell.server.notes)
    return flags


def notes(result: BenchResult) -> list[str]:
    out = list(result.notes)
    if result.tokenization is not None:
        out.extend(result.tokenization.notes)
    for cell in result.cells:
        out.extend(cell_flags(cell))
    return out


def print_probe(console: Console, probe: ProbeResult) -> None:
    verdict = "[green]accepted[/]" if probe.accepted else "[red]not accepted[/]"
    console.print(
        f"context probe: {probe.target_tokens:,} tokens targeted, {verdict}; "
        f"prompt tokens {probe.prompt_tokens if probe.prompt_tokens is not None else '-'}, "
        f"TTFT {_num(probe.ttft_s, 2)} s, prefill {_num(probe.prefill_tok_s, 1)} tok/s"
        + (f" (max_model_len {probe.max_model_len:,})" if probe.max_model_len else "")
    )
    if probe.error:
        console.print(f"  [red]error:[/] {probe.error}", highlight=False)


def print_result(console: Console, result: BenchResult, detail: bool = False) -> None:
    if result.probe is not None:
        print_probe(console, result.probe)
    if result.cells:
        console.print(matrix_table(result))
        if detail:
            console.print(detail_table(result))
        server = server_table(result)
        if server is not None:
            console.print(server)
        for extra in (open_loop_table(result), turns_table(result), backends_table(result)):
            if extra is not None:
                console.print(extra)
    if result.startup is not None:
        up = result.startup
        phases = ", ".join(f"{p} {v:.1f} s" for p, v in up.seconds.items())
        console.print(f"start-up ({up.kind} at {up.started_at}): {phases}", highlight=False)
        for regression in up.regressions:
            console.print(f"[yellow]start-up regression:[/] {regression}", highlight=False)
    for note in notes(result):
        console.print(f"[yellow]note:[/] {note}", highlight=False)

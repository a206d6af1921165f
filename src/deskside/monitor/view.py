"""Rich renderings of `deskside monitor check` reports and `deskside top` snapshots. Text
that came from outside (series names, labels, alert summaries, Prometheus's errors) is
escaped before it reaches the console."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from deskside.monitor.check import CheckReport
from deskside.monitor.snapshot import FabricView, NodeView, Snapshot
from deskside.terminal import shown
from deskside.units import format_bytes


def _safe(text: object) -> str:
    return shown(text, multiline=False)


def check_table(report: CheckReport) -> RenderableType:
    s = report.summary()
    title = (
        f"{_safe(report.recipe or 'monitoring')}: {s['with_data']} of {s['expressions']} "
        f"expressions have data, {s['declared']} without data for a declared reason, "
        f"{s['problems']} problem(s), {s['firing']} alert(s) firing "
        f"(Prometheus {_safe(report.prometheus)})"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("source", overflow="fold")
    table.add_column("data")
    table.add_column("reason", overflow="fold")
    table.add_column("expression", style="dim", overflow="fold")
    for f in report.findings:
        if f.has_data:
            data = "[green]yes[/]"
        elif f.declared:
            data = "[yellow]n/a[/]"
        else:
            data = "[red]no[/]"
        reason = _safe(f.reason) if f.reason else ""
        if f.firing:
            reason = ("[red]FIRING[/] " + reason).strip()
        table.add_row(_safe(f.source), data, reason, _safe(f.expr))
    return table


def _bytes(n: float | None) -> str:
    return "-" if n is None else format_bytes(int(n))


def _rate(n: float | None) -> str:
    return "-" if n is None else f"{format_bytes(int(n))}/s"


def _fabric(f: FabricView | None) -> str:
    if f is None:
        return "-"
    lines = [
        f"rx {_rate(f.rx_bytes_per_s)}  tx {_rate(f.tx_bytes_per_s)}  ({', '.join(f.devices)})"
    ]
    bad = {k: v for k, v in f.counters.items() if v}
    if bad:
        lines.append(", ".join(f"{k} {v:g}" for k, v in sorted(bad.items())))
    return "\n".join(_safe(line) for line in lines)


def _gpu(n: NodeView) -> str:
    if n.gpu_present is False:
        return "no GPU"
    if not n.gpus:
        return "-" if n.gpu_present is None else "GPU (no readings)"
    parts = []
    for g in n.gpus:
        bits = [f"gpu {g.gpu}"]
        if g.utilization is not None:
            bits.append(f"{g.utilization * 100:.0f}%")
        if g.memory_used_bytes is not None:
            bits.append(_bytes(g.memory_used_bytes))
        if g.power_watts is not None:
            bits.append(f"{g.power_watts:.0f} W")
        if g.temperature_celsius is not None:
            bits.append(f"{g.temperature_celsius:.0f} C")
        parts.append(" ".join(bits))
    return _safe("; ".join(parts))


def _gid(n: NodeView) -> str:
    if n.gid_index is None:
        return "-"
    text = str(n.gid_index)
    if n.gid_drift:
        launched = n.gid_launched_index if n.gid_launched_index is not None else "?"
        text += f" [red]DRIFT (engine uses {launched})[/]"
    return text


def nodes_table(snap: Snapshot) -> Table:
    table = Table(title="nodes", title_justify="left")
    for col in ("node", "mem available", "floor", "headroom", "GPU", "fabric", "GID"):
        table.add_column(col, overflow="fold")
    for n in snap.nodes:
        headroom = _bytes(n.headroom_bytes)
        if n.below_floor:
            headroom = f"[bold red]{headroom}[/]"
        elif n.headroom_bytes is not None:
            headroom = f"[green]{headroom}[/]"
        table.add_row(
            f"{_safe(n.name)} [dim]{_safe(n.role)}[/]",
            _bytes(n.memory_available_bytes),
            _bytes(n.memory_floor_bytes),
            headroom,
            _gpu(n),
            _fabric(n.fabric),
            _gid(n),
        )
    return table


def engine_table(snap: Snapshot) -> Table:
    e = snap.engine

    def num(x: float | None, fmt: str = "{:g}") -> str:
        return "-" if x is None else fmt.format(x)

    table = Table(title="engine", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value")
    up = "-" if e.up is None else ("[green]up[/]" if e.up else "[red]down[/]")
    table.add_row("engine", up)
    table.add_row("KV cache usage", num(e.kv_cache_usage, "{:.1%}"))
    table.add_row(
        "requests running / waiting", f"{num(e.requests_running)} / {num(e.requests_waiting)}"
    )
    table.add_row("generated tokens/s", num(e.generation_tokens_per_s, "{:.1f}"))
    if e.spec_acceptance is not None or e.spec_acceptance_per_position:
        per_pos = "  ".join(
            f"{p.position}: {p.acceptance:.0%}" for p in e.spec_acceptance_per_position
        )
        table.add_row(
            "speculative acceptance", f"{num(e.spec_acceptance, '{:.0%}')}  [dim]{per_pos}[/]"
        )
    table.add_row("seconds since last token", num(e.seconds_since_last_token, "{:.1f}"))
    return table


def alerts_table(snap: Snapshot) -> RenderableType:
    if snap.alerts is None:
        return Text("alerts: unknown (no Prometheus)", style="dim")
    if not snap.alerts:
        return Text("alerts: none firing", style="green")
    table = Table(title="alerts", title_justify="left")
    for col in ("alert", "state", "node", "summary"):
        table.add_column(col, overflow="fold")
    for a in snap.alerts:
        state = f"[red]{_safe(a.state)}[/]" if a.state == "firing" else _safe(a.state)
        table.add_row(_safe(a.name), state, _safe(a.node or ""), _safe(a.summary or ""))
    return table


def top_view(snap: Snapshot) -> RenderableType:
    head = Text.from_markup(
        f"[bold]{escape(_safe(snap.recipe or 'cluster'))}[/]  {escape(snap.taken_at)}  "
        f"[dim]from {escape(snap.source)}[/]"
    )
    notes = [Text(f"note: {_safe(n)}", style="yellow") for n in snap.notes]
    return Group(head, nodes_table(snap), engine_table(snap), alerts_table(snap), *notes)

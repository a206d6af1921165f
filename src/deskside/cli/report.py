"""Rich renderings of library results for the terminal. Every text that comes from a
recipe, a model, a node or an engine goes through `shown` (markup and control characters
printed literally)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from deskside.terminal import literal, shown
from deskside.units import format_gib

if TYPE_CHECKING:
    from deskside.operate.set_status import SetStatus
    from deskside.operate.status import ClusterStatus, Status
    from deskside.planner.plan import Plan
    from deskside.replicas.start import SetReport
    from deskside.runtime.pipeline import UpReport
    from deskside.runtime.report import Report, Stopped


def _params(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def print_plan(console: Console, p: Plan) -> None:
    m, e = p.model, p.engine
    console.print(
        f"[bold]{shown(m['architecture'])}[/] ({shown(m['family'])}): "
        f"{_params(m['total_params'])} parameters, "
        f"{_params(m['active_params'])} active per token, weights {shown(m['weights_format'])} "
        f"{format_gib(m['weights_bytes_total'])} in all"
    )
    spec = e["speculative"]
    dp = e.get("data_parallel_size", 1)
    console.print(
        f"engine: {e['device']}, TP {e['tensor_parallel_size']} "
        f"x PP {e['pipeline_parallel_size']}"
        + (f" x DP {dp}" if dp > 1 else "")
        + (" with expert parallel" if e.get("enable_expert_parallel") else "")
        + ", "
        f"kv_cache_dtype {e['kv_cache_dtype']}, block {e['block_size']}, "
        f"max_num_batched_tokens {e['max_num_batched_tokens']:,}, max_num_seqs {e['max_num_seqs']}"
        + (f", speculative {spec['method']} x{spec['num_speculative_tokens']}" if spec else "")
    )
    table = Table(title="per rank", show_lines=False)
    for col in (
        "rank",
        *(["DP rank"] if dp > 1 else []),
        "node",
        "weights",
        "non-KV",
        "KV available",
        "KV/token",
        "blocks",
        "KV tokens",
        "max conc.",
        "need @max_len",
    ):
        table.add_column(col, justify="right")
    for r in p.ranks:
        table.add_row(
            str(r.rank),
            *([str(r.data_parallel_rank)] if dp > 1 else []),
            shown(r.node or "-"),
            format_gib(r.weights_bytes),
            format_gib(r.non_kv_bytes),
            format_gib(r.available_kv_bytes),
            f"{r.kv_bytes_per_token:,} B",
            f"{r.num_blocks:,}",
            f"{r.kv_cache_tokens:,}",
            f"{r.max_concurrency:.2f}x",
            format_gib(r.needed_kv_bytes),
        )
    console.print(table)
    if p.memory is not None:
        mem = p.memory
        console.print(
            f"node memory ({shown(mem.hardware)}{', unified' if mem.unified else ''}): "
            f"{format_gib(mem.total_bytes)} total, "
            f"vLLM budget {format_gib(mem.vllm_budget_bytes)}, "
            f"headroom {format_gib(mem.headroom_bytes)} "
            f"(floor {format_gib(mem.safety_floor_bytes)})"
        )
    if p.fits:
        console.print(f"[green]fits[/]: max_model_len {p.max_model_len:,}")
        console.print(f"  vLLM will log: [cyan]{shown(p.kv_cache_line)}[/]", highlight=False)
    else:
        console.print(f"[bold red]refused[/]: {shown(p.refusal)}", highlight=False)
    for w in p.warnings:
        console.print(f"[yellow]warning:[/] {shown(w)}", highlight=False)
    if p.assumptions:
        console.print("[dim]assumptions:[/]")
        for a in p.assumptions:
            console.print(f"  [dim]- {shown(a)}[/]", highlight=False)


def print_transcript(console: Console, report: UpReport) -> None:
    """A dry run's operations, in the order they would run, node by node."""
    stage = None
    for line in report.transcript:
        if line["stage"] != stage:
            stage = line["stage"]
            console.print(f"[bold]{shown(stage)}[/]")
        node, op = literal(line["node"]), literal(line["op"])
        console.print(Text.assemble(("  " + node, "cyan"), " " + op))


def print_up(out: Console, err: Console, r: Report) -> None:
    """The stages of an `up` (or a dry run's transcript), then the outcome; a replica set's
    group by group, then the set's."""
    from deskside.replicas.start import SetReport
    from deskside.runtime.pipeline import UpReport

    if isinstance(r, SetReport):
        print_set_up(out, err, r)
        return
    assert isinstance(r, UpReport), f"no printing for {type(r).__name__}"
    print_run_up(out, err, r)


def print_set_up(out: Console, err: Console, r: SetReport) -> None:
    for group, one in r.groups.items():
        out.print(f"[bold]group {shown(group)}[/]", highlight=False)
        print_run_up(out, err, one)
    for note in r.notes:
        err.print(f"[yellow]note:[/] {shown(note)}", highlight=False)
    if r.ok and not r.dry_run:
        out.print(
            f"[green]READY[/] {shown(r.recipe)}: {len(r.groups)} groups behind "
            f"{shown(r.proxy_url)} in {r.seconds:.0f} s"
        )
        out.print(f"  serving: {shown(', '.join(r.served_names))}")
    elif not r.ok:
        err.print(
            f"[bold red]up failed[/] at {shown(r.failed_stage)}: {shown(r.error)}",
            highlight=False,
        )
        if r.hint:
            err.print(f"  [dim]hint:[/] {shown(r.hint)}", highlight=False)
        if r.stopped_groups:
            err.print(f"  stopped again: groups {shown(', '.join(r.stopped_groups))}")


def print_run_up(out: Console, err: Console, r: UpReport) -> None:
    for note in r.notes:
        err.print(f"[yellow]note:[/] {shown(note)}", highlight=False)
    if r.dry_run:
        print_transcript(out, r)
    for s in r.stages:
        colour = {"ok": "green", "skipped": "dim", "planned": "cyan"}.get(s.status, "red")
        mark = f"[{colour}]{s.status:<7}[/]"
        detail = f" - {shown(s.detail)}" if s.detail else ""
        out.print(f"  {s.name:<10} {mark} {s.seconds:6.1f} s{detail}", highlight=False)
    if r.dry_run and r.ok:
        out.print(f"dry run: nothing changed ({r.seconds:.1f} s)")
        return
    if r.ok:
        release = f" release {shown(r.release)}" if r.release else ""
        out.print(
            f"[green]READY[/] {shown(r.recipe)}{release} in {r.seconds:.0f} s: {shown(r.api_url)}"
            + (f" (proxy {shown(r.proxy_url)})" if r.proxy_url else "")
        )
        out.print(f"  serving: {shown(', '.join(r.served_names))}")
        if r.logged_kv_cache_line:
            out.print(f"  planned: {shown(r.planned_kv_cache_line)}", highlight=False)
            out.print(f"  engine:  {shown(r.logged_kv_cache_line)}", highlight=False)
        return
    err.print(
        f"[bold red]up failed[/] at {shown(r.failed_stage)}: {shown(r.error)}", highlight=False
    )
    if r.hint:
        err.print(f"  [dim]hint:[/] {shown(r.hint)}", highlight=False)
    rb = r.rollback
    if rb is not None:
        colour = "green" if rb.ok else "red"
        err.print(
            f"[{colour}]rollback {'done' if rb.ok else 'FAILED'}[/] in {rb.seconds:.0f} s: "
            f"{shown(rb.detail)}",
            highlight=False,
        )
        if rb.error:
            err.print(f"  {shown(rb.error)}", highlight=False)


def print_down(out: Console, err: Console, r: Stopped) -> None:
    if r.leftovers:
        for leftover in r.leftovers:
            err.print("[red]could not stop:[/]", shown(leftover))
    else:
        out.print(f"{shown(r.what)}: down")


def print_status(console: Console, st: Status) -> None:
    """A run's status, or a replica set's: the set's verdict, then each group's."""
    from deskside.operate.set_status import SetStatus
    from deskside.operate.status import ClusterStatus

    if isinstance(st, SetStatus):
        print_set_status(console, st)
        return
    assert isinstance(st, ClusterStatus), f"no printing for {type(st).__name__}"
    print_run_status(console, st)


def print_set_status(console: Console, st: SetStatus) -> None:
    colour = {"READY": "green", "DEGRADED": "yellow", "STARTING": "cyan"}.get(st.cluster, "red")
    console.print(
        f"[bold {colour}]{shown(st.cluster)}[/] {shown(st.recipe)}: proxy "
        f"{shown(st.proxy_url)} ({shown(st.proxy)}), {len(st.groups)} groups"
    )
    for reason in st.reasons:
        console.print(f"  {shown(reason)}", highlight=False)
    for group, one in st.groups.items():
        console.print(f"[bold]group {shown(group)}[/]", highlight=False)
        if one is None:
            console.print("  not running (no run record)")
        else:
            print_run_status(console, one)


def print_run_status(console: Console, st: ClusterStatus) -> None:
    colour = {"READY": "green", "DEGRADED": "yellow", "STARTING": "cyan"}.get(st.cluster, "red")
    console.print(
        f"[bold {colour}]{shown(st.cluster)}[/] {shown(st.recipe)}: {shown(st.api_url)} "
        f"(engine {shown(st.engine)})"
    )
    table = Table()
    for col in ("node", "role", "pid", "state", "processes", "RSS", "model"):
        table.add_column(col)
    for n in st.nodes:
        table.add_row(
            shown(n.name),
            shown(n.role),
            str(n.pid),
            shown(n.state),
            str(n.processes),
            format_gib(n.rss_bytes) if n.rss_bytes else "-",
            shown(n.model or "-"),
        )
    console.print(table)
    services = [(n.name, s) for n in st.nodes for s in n.services]
    if services:
        table = Table(title="services")
        for col in ("node", "service", "pid", "state"):
            table.add_column(col)
        for node, s in services:
            state = s.state if s.state == "running" else f"[red]{shown(s.state)}[/]"
            table.add_row(shown(node), shown(s.name), str(s.pid), state)
        console.print(table)
    if st.kv_cache_usage is not None:
        console.print(
            f"KV cache usage {st.kv_cache_usage:.1%}, running {st.requests_running:.0f}, "
            f"waiting {st.requests_waiting:.0f}"
        )
    if st.release:
        console.print(f"release {shown(st.release)}")
    if st.startup is not None:
        print_startup(console, st.startup)
    if st.suspects:
        console.print(f"suspected: {shown(', '.join(st.suspects))}", highlight=False)
    rec = st.recovery
    if rec is not None:
        on = "on" if rec.get("enabled") else "off (survive.recover.enabled)"
        spent = "; budget spent" if rec.get("budget_exhausted") else ""
        console.print(
            f"watch: last look {rec.get('watched_seconds_ago')} s ago; recovery {on}; "
            f"restarts {rec.get('restarts_in_period')}/{rec.get('max_restarts')} in "
            f"{rec.get('period_seconds'):.0f} s{spent}",
            highlight=False,
        )
    for reason in st.reasons:
        console.print(f"[yellow]- {shown(reason)}[/]", highlight=False)


def print_startup(console: Console, startup: dict[str, object]) -> None:
    """The last start-up's phases, and each regression from the previous start."""
    seconds = startup.get("seconds")
    phases = (
        ", ".join(f"{shown(str(p))} {v:.1f} s" for p, v in seconds.items())
        if isinstance(seconds, dict)
        else "-"
    )
    console.print(
        f"start-up ({shown(str(startup.get('kind')))} at {shown(str(startup.get('started_at')))}"
        f"): {phases}",
        highlight=False,
    )
    regressions = startup.get("regressions")
    for regression in regressions if isinstance(regressions, list) else []:
        console.print(f"[yellow]start-up regression: {shown(str(regression))}[/]", highlight=False)


def print_demo(console: Console, r: dict[str, object]) -> None:
    for note in r.get("notes", []):  # type: ignore[attr-defined]
        console.print(f"[yellow]note:[/] {shown(note)}", highlight=False)
    console.print(f"cluster up in {r['startup_seconds']} s at {shown(r['api_url'])}")
    match = "[green]match[/]" if r["kv_match"] else "[red]differ[/]"
    console.print(f"KV cache, plan vs engine ({match}):", highlight=False)
    console.print(f"  plan:   {shown(r['planned_kv_cache_line'])}", highlight=False)
    console.print(f"  engine: {shown(r['logged_kv_cache_line'])}", highlight=False)
    for c in r["completions"]:  # type: ignore[attr-defined]
        console.print(f"chat via {shown(repr(c['model']))}: {c['output_tokens']} tokens")
    table = Table(title="tiny model on CPU, TP=2 across two nodes (not a GPU result)")
    for col in (
        "Prompt",
        "Concurrency",
        "TTFT (s)",
        "Prefill tok/s",
        "Decode tok/s",
        "Aggregate tok/s",
    ):
        table.add_column(col, justify="right")
    for row in r["table"]:  # type: ignore[attr-defined]
        prefill = row["prefill_tok_s"]
        table.add_row(
            f"{row['prompt_tokens']:.0f}",
            str(row["concurrency"]),
            f"{row['ttft_s']:.2f}",
            "-" if prefill != prefill else f"{prefill:.0f}",
            f"{row['decode_tok_s']:.1f}",
            f"{row['aggregate_tok_s']:.1f}",
        )
    console.print(table)
    console.print(f"total {r['total_seconds']} s; torn down")

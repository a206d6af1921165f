"""`deskside doctor RECIPE`: a thin face over deskside.doctor.run."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from deskside.cli.common import JsonFlag, RecipeArg, emit_json, err, fail, out, steps
from deskside.errors import DesksideError, UsageError
from deskside.terminal import shown
from deskside.units import format_bytes

if TYPE_CHECKING:
    from deskside.doctor.findings import DoctorReport, Finding
    from deskside.doctor.run import ExtraCheck

KnownHosts = Annotated[
    str | None,
    typer.Option(help="ssh: nodes: known_hosts file (default ~/.ssh/known_hosts)."),
]


def _extra_checks() -> list[ExtraCheck]:
    """The checks of nodes that must match (kernel, driver, CUDA, NCCL, vLLM, clock, MTU)."""
    from deskside.doctor.match import must_match

    return [must_match]


def _table(report: DoctorReport) -> Table:
    table = Table(title=f"deskside doctor {shown(report.recipe)}")
    for col in ("node", "kind", "what", "reclaimable", "fix"):
        table.add_column(col, overflow="fold")
    style = {"problem": "red", "warning": "yellow", "info": "dim"}
    for f in sorted(report.findings, key=lambda f: (f.node, f.severity != "problem")):
        fix = "fixed" if f.fixed else ("--fix: " if f.fixable else "") + (f.fix or "")
        table.add_row(
            shown(f.node),
            f"[{style[f.severity]}]{shown(f.kind)}[/]",
            shown(f.what),
            format_bytes(f.reclaimable_bytes) if f.reclaimable_bytes else "",
            shown(fix),
        )
    return table


def _print(report: DoctorReport) -> None:
    out.print(_table(report))
    for node, mem in sorted(report.memory.items()):
        need = mem.get("need_bytes")
        out.print(
            f"{shown(node)}: {format_bytes(mem['available_bytes'])} of "
            f"{format_bytes(mem['total_bytes'])} available"
            + (f", the plan needs {format_bytes(need)}" if need is not None else "")
            + f", {format_bytes(mem['reclaimable_bytes'])} reclaimable",
            highlight=False,
        )
    verdict = "ok" if report.ok else f"{len(report.problems)} problem(s)"
    out.print(
        f"{shown(report.recipe)}: {verdict}; {format_bytes(report.reclaimable_bytes)} "
        "reclaimable in all",
        highlight=False,
    )


def _progress(f: Finding, ok: bool, why: str) -> None:
    if ok:
        err.print(f"[green]done:[/] {shown(f.node)}: {shown(f.fix or f.what)}", highlight=False)
    else:
        err.print(
            f"[red]not done:[/] {shown(f.node)}: {shown(f.fix or f.what)}: {shown(why)}",
            highlight=False,
        )


def doctor(
    recipe: RecipeArg,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="Remove what doctor can prove stale (orphaned shared memory, records of "
            "engines that no longer run), after a confirmation.",
        ),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="With --fix: do not ask.")] = False,
    stop_pid: Annotated[
        list[int] | None,
        typer.Option(
            "--stop-pid",
            help="Send SIGTERM to this engine process (a pid doctor reported as a foreign "
            "engine; checked to be the same process right before). Repeatable.",
        ),
    ] = None,
    known_hosts: KnownHosts = None,
    as_json: JsonFlag = False,
) -> None:
    """What holds each node's memory, disk and ports before the recipe starts: engines and
    containers of other stacks, orphaned shared memory, records of dead runs, free disk,
    taken ports, and memory available against the plan's need. Exits 1 when a problem
    remains."""
    from deskside.doctor.run import Doctor
    from deskside.home import resolve_recipe
    from deskside.recipe.groups import refuse_replica_set
    from deskside.runtime.transports import transport_for

    try:
        loaded, path = resolve_recipe(recipe)
        refuse_replica_set(loaded, "doctor")
        transports = {n.name: transport_for(n, known_hosts) for n in loaded.cluster.nodes}
        doc = Doctor(loaded, path, transports, known_hosts, extra_checks=_extra_checks())
        if as_json:
            report = doc.run()
        else:
            with steps("checking the nodes"):
                report = doc.run()
        progress = None if as_json else _progress
        if stop_pid:
            report = doc.stop_pids(report, stop_pid, progress)
        if fix:
            actions = [f for f in report.findings if f.fixable and not f.fixed]
            if actions and not yes:
                if as_json or not sys.stdin.isatty():
                    raise UsageError(
                        f"--fix would act on {len(actions)} finding(s) and cannot ask here",
                        hint="review `deskside doctor RECIPE`, then add --yes",
                    )
                for f in actions:
                    err.print(f"  {shown(f.node)}: {shown(f.fix or f.what)}", highlight=False)
                if not typer.confirm(f"Do these {len(actions)} action(s)?", err=True):
                    raise typer.Exit(1)
            report = doc.fix(report, progress)
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(report.to_dict())
    else:
        _print(report)
    if not report.ok:
        raise typer.Exit(1)

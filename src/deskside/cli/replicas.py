"""The faces of `up`, `down` and `status` for a replica set (a recipe with `replicas`):
every group is a run of its own, the set adds one proxy (`deskside.replicas`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from deskside.cli.common import emit_json, err, out, steps
from deskside.errors import PlanRefused
from deskside.terminal import shown

if TYPE_CHECKING:
    from deskside.recipe.types import Recipe
    from deskside.records.replica_set import SetRecord
    from deskside.replicas.start import SetReport
    from deskside.replicas.status import SetStatus


def up_set_command(
    loaded: Recipe,
    path: Path,
    timeout: float,
    dry_run: bool,
    known_hosts: str | None,
    as_json: bool,
) -> None:
    """Start every group, then the proxy (raises DesksideError for a refusal)."""
    from deskside.records.names import run_lock
    from deskside.replicas.plans import plan_set, set_refusal
    from deskside.replicas.start import up_set
    from deskside.runtime.pipeline import UpOptions

    plans = plan_set(loaded, path)
    refusal = set_refusal(plans)
    if refusal is not None:
        raise PlanRefused(
            f"deskside refuses to launch: {refusal}",
            hint="lower max_model_len (see `deskside plan`) or give the KV cache more memory",
        )
    options = UpOptions(known_hosts=known_hosts, dry_run=dry_run, timeout=timeout)
    with run_lock(loaded.name), steps("starting") as say:
        report = up_set(loaded, path, plans, options, progress=say)
    if as_json:
        emit_json(report.to_dict())
    else:
        print_set_up(report)
    if not report.ok:
        raise typer.Exit(report.exit_code or 1)


def print_set_up(r: SetReport) -> None:
    from deskside.cli.report import print_up

    for group, one in r.groups.items():
        out.print(f"[bold]group {shown(group)}[/]", highlight=False)
        print_up(out, err, one)
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


def down_set_command(record: SetRecord, group: str | None, as_json: bool) -> None:
    from deskside.records.names import run_lock
    from deskside.replicas.start import down_set

    with run_lock(record.recipe_name):
        leftovers = down_set(record, group=group)
    what = record.recipe_name + (f" group {group}" if group else "")
    if as_json:
        emit_json(
            {
                "recipe": record.recipe_name,
                "group": group,
                "stopped": not leftovers,
                "leftovers": leftovers,
            }
        )
    elif leftovers:
        for leftover in leftovers:
            err.print("[red]could not stop:[/]", shown(leftover))
    else:
        out.print(f"{shown(what)}: down")
    if leftovers:
        raise typer.Exit(1)


def status_set_command(record: SetRecord, known_hosts: str | None, as_json: bool) -> None:
    from deskside.replicas.status import set_status

    st = set_status(record, known_hosts)
    if as_json:
        emit_json(st.to_dict())
    else:
        print_set_status(st)
    if st.cluster != "READY":
        raise typer.Exit(1)


def print_set_status(st: SetStatus) -> None:
    from deskside.cli.report import print_status

    colour = {"READY": "green", "DEGRADED": "yellow", "STARTING": "cyan"}.get(st.cluster, "red")
    out.print(
        f"[bold {colour}]{shown(st.cluster)}[/] {shown(st.recipe)}: proxy "
        f"{shown(st.proxy_url)} ({shown(st.proxy)}), {len(st.groups)} groups"
    )
    for reason in st.reasons:
        out.print(f"  {shown(reason)}", highlight=False)
    for group, one in st.groups.items():
        out.print(f"[bold]group {shown(group)}[/]", highlight=False)
        if one is None:
            out.print("  not running (no run record)")
        else:
            print_status(out, one)

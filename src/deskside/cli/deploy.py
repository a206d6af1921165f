"""The CLI's face of `deskside.deploy`: `up` of a recipe with `ssh:` nodes, and `down`,
`status`, `logs` of a deployed run. `deskside.cli` calls these; they print and exit."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer
from rich.console import Console

from deskside import deploy
from deskside.planner.plan import Plan
from deskside.recipe.types import Recipe


def _json(data: object) -> None:
    import json

    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def print_report(out: Console, err: Console, r: deploy.DeployReport) -> None:
    for note in r.notes:
        err.print(f"[yellow]note:[/] {note}", highlight=False)
    for s in r.stages:
        colour = {"ok": "green", "skipped": "dim"}.get(s.status, "red")
        mark = f"[{colour}]{s.status:<7}[/]"
        detail = f" - {s.detail}" if s.detail else ""
        out.print(f"  {s.name:<10} {mark} {s.seconds:6.1f} s{detail}", highlight=False)
    if r.dry_run and r.ok:
        out.print(f"dry run: nothing changed on the nodes ({r.seconds:.1f} s)")
        return
    if r.ok:
        out.print(
            f"[green]READY[/] {r.recipe} release {r.release} in {r.seconds:.0f} s: {r.api_url}"
            + (f" (proxy {r.proxy_url})" if r.proxy_url else "")
        )
        out.print(f"  serving: {', '.join(r.served_names)}")
        if r.logged_kv_cache_line:
            out.print(f"  planned: {r.planned_kv_cache_line}", highlight=False)
            out.print(f"  engine:  {r.logged_kv_cache_line}", highlight=False)
        return
    err.print(f"[bold red]deploy failed[/] at {r.failed_stage}: {r.error}", highlight=False)
    if r.hint:
        err.print(f"  [dim]hint:[/] {r.hint}", highlight=False)
    rb = r.rollback
    if rb is not None:
        colour = "green" if rb.ok else "red"
        err.print(
            f"[{colour}]rollback {'done' if rb.ok else 'FAILED'}[/] in {rb.seconds:.0f} s: "
            f"{rb.detail}",
            highlight=False,
        )
        if rb.error:
            err.print(f"  {rb.error}", highlight=False)


def up(
    recipe: Recipe,
    path: Path,
    plan: Plan,
    *,
    dry_run: bool,
    known_hosts: str | None,
    timeout: float,
    as_json: bool,
    out: Console,
    err: Console,
) -> None:
    options = deploy.DeployOptions(known_hosts=known_hosts, dry_run=dry_run, timeout=timeout)
    t0 = time.monotonic()
    with err.status("deploying") as spinner:
        report = deploy.deploy(
            recipe,
            path,
            plan,
            options,
            progress=lambda msg: spinner.update(f"{msg} ({time.monotonic() - t0:.0f} s)"),
        )
    if as_json:
        _json(report.to_dict())
    else:
        print_report(out, err, report)
    if not report.ok:
        raise typer.Exit(report.exit_code or 1)


def down(run: deploy.RemoteRun, as_json: bool, out: Console, err: Console) -> None:
    leftovers = deploy.down(run)
    if as_json:
        _json({"recipe": run.recipe_name, "stopped": not leftovers, "leftovers": leftovers})
    elif leftovers:
        err.print(f"[red]could not stop:[/] {', '.join(leftovers)}")
    else:
        out.print(f"{run.recipe_name}: down")
    if leftovers:
        raise typer.Exit(1)


def status(run: deploy.RemoteRun, as_json: bool, out: Console) -> None:
    st = deploy.status(run)
    if as_json:
        _json({**st.to_dict(), "release": run.release})
    else:
        from deskside.report import print_status

        print_status(out, st)
        out.print(f"release {run.release}")
    if st.cluster != "READY":
        raise typer.Exit(1)


def logs(run: deploy.RemoteRun, node: str | None, follow: bool, lines: int, as_json: bool) -> None:
    opened = deploy.open_logs(run, node)
    if as_json:
        _json({log.node: deploy.log_tail(log, lines).splitlines() for log in opened})
        return
    many = len(opened) > 1

    def write(name: str, text: str) -> None:
        for line in text.splitlines():
            sys.stdout.write(f"[{name}] {line}\n" if many else f"{line}\n")
        sys.stdout.flush()

    for log in opened:
        write(log.node, deploy.log_tail(log, lines))
    pending = {log.node: "" for log in opened}  # a line still being written
    while follow:
        time.sleep(0.5)
        for log in opened:
            text = pending[log.node] + deploy.log_follow(log)
            complete, _, pending[log.node] = text.rpartition("\n")
            write(log.node, complete)

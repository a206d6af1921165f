"""`deskside up`, `down`, `status`, `logs` and `demo`."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from deskside.cli.common import JsonFlag, RecipeArg, RunOpt, emit_json, err, fail, out
from deskside.errors import DesksideError, UsageError


def up(
    recipe: RecipeArg,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for readiness.")] = 900,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="ssh: nodes: stop after render and diff.")
    ] = False,
    known_hosts: Annotated[
        str | None,
        typer.Option(help="ssh: nodes: known_hosts file (default ~/.ssh/known_hosts)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Plan, then start every node (workers first, then the head) and wait until ready.
    Recipes with ssh: nodes are deployed over SSH (deskside.deploy), with rollback."""
    from deskside.home import resolve_recipe
    from deskside.planner.inputs import plan_recipe
    from deskside.runtime.native import up as start

    try:
        loaded, path = resolve_recipe(recipe)
        planned = plan_recipe(loaded, path)
        from deskside.deploy import is_remote

        if is_remote(loaded):
            from deskside.cli import deploy as deploy_cli

            return deploy_cli.up(
                loaded,
                path,
                planned,
                dry_run=dry_run,
                known_hosts=known_hosts,
                timeout=timeout,
                as_json=as_json,
                out=out,
                err=err,
            )
        if dry_run:
            raise UsageError(
                "--dry-run applies to recipes with ssh: nodes",
                hint="for local recipes: deskside render RECIPE --out DIR / deskside diff RECIPE",
            )
        t0 = time.monotonic()
        with err.status("planning") as spinner:
            state = start(
                loaded,
                path,
                planned,
                timeout=timeout,
                progress=lambda msg: spinner.update(f"{msg} ({time.monotonic() - t0:.0f} s)"),
            )
    except DesksideError as exc:
        fail(exc, as_json)
    seconds = time.monotonic() - t0
    if as_json:
        emit_json({**state.model_dump(mode="json"), "startup_seconds": round(seconds, 1)})
        return
    out.print(f"[green]READY[/] {state.recipe_name} in {seconds:.0f} s: {state.api_url}")
    out.print(f"  serving: {', '.join(state.served_names)}")
    out.print(f"  planned: {state.planned_kv_cache_line}", highlight=False)
    out.print(f"  engine:  {state.logged_kv_cache_line}", highlight=False)


def down(run: RunOpt = None, as_json: JsonFlag = False) -> None:
    """Stop the run: SIGTERM, SIGKILL after a grace period; remove its shared memory and
    the namespaces it created."""
    from deskside.runtime.native import down as stop
    from deskside.runtime.native import load_state

    try:
        from deskside.cli import deploy as deploy_cli
        from deskside.deploy import find_remote_run

        if (remote := find_remote_run(run)) is not None:
            return deploy_cli.down(remote, as_json, out, err)
        state = load_state(run)
        leftovers = stop(state)
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json({"recipe": state.recipe_name, "stopped": not leftovers, "leftovers": leftovers})
    elif leftovers:
        err.print(f"[red]could not stop:[/] {', '.join(leftovers)}")
    else:
        out.print(f"{state.recipe_name}: down")
    if leftovers:
        raise typer.Exit(1)


def status(run: RunOpt = None, as_json: JsonFlag = False) -> None:
    """Per node: role, pid, state, memory; cluster READY / DEGRADED / DOWN; KV usage and
    requests from /metrics."""
    from deskside.runtime.native import load_state
    from deskside.runtime.native import status as probe

    try:
        from deskside.cli import deploy as deploy_cli
        from deskside.deploy import find_remote_run

        if (remote := find_remote_run(run)) is not None:
            return deploy_cli.status(remote, as_json, out)
        st = probe(load_state(run))
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(st.to_dict())
    else:
        from deskside.report import print_status

        print_status(out, st)
    if st.cluster != "READY":
        raise typer.Exit(1)


def logs(
    node: Annotated[str | None, typer.Argument(help="Node name (default: all).")] = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing.")] = False,
    lines: Annotated[int, typer.Option("-n", help="Lines from the end.")] = 40,
    run: RunOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Print (and follow) node logs."""
    from deskside.runtime.native import load_state

    try:
        from deskside.cli import deploy as deploy_cli
        from deskside.deploy import find_remote_run

        if (remote := find_remote_run(run)) is not None:
            return deploy_cli.logs(remote, node, follow, lines, as_json)
        state = load_state(run)
        chosen = [n for n in state.nodes if node in (None, n.name)]
        if not chosen:
            raise UsageError(
                f"no node {node!r}", hint="nodes: " + ", ".join(n.name for n in state.nodes)
            )
    except DesksideError as exc:
        fail(exc)
    if as_json:
        emit_json(
            {
                n.name: (
                    Path(n.log).read_text(errors="replace").splitlines()[-lines:]
                    if Path(n.log).exists()
                    else []
                )
                for n in chosen
            }
        )
        return
    offsets = {}
    for n in chosen:
        text = Path(n.log).read_text(errors="replace") if Path(n.log).exists() else ""
        for line in text.splitlines()[-lines:]:
            sys.stdout.write(f"[{n.name}] {line}\n" if len(chosen) > 1 else f"{line}\n")
        offsets[n.log] = len(text.encode())
    while follow:
        time.sleep(0.5)
        for n in chosen:
            with open(n.log, "rb") as f:
                f.seek(offsets[n.log])
                chunk = f.read()
            offsets[n.log] += len(chunk)
            for line in chunk.decode(errors="replace").splitlines():
                sys.stdout.write(f"[{n.name}] {line}\n" if len(chosen) > 1 else f"{line}\n")
        sys.stdout.flush()


def demo(
    keep_up: Annotated[bool, typer.Option(help="Leave the cluster running.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """The embedded two-node run: tiny DeepSeek-V3 model, TP=2 across two local nodes with
    MTP speculative decoding, real chat completions, plan vs engine, then tear down."""
    from deskside.demo import run_demo

    t0 = time.monotonic()
    try:
        with err.status("starting") as spinner:
            result = run_demo(
                lambda msg: spinner.update(f"{msg} ({time.monotonic() - t0:.0f} s)"), keep_up
            )
    except DesksideError as exc:
        fail(exc, as_json)
    result["total_seconds"] = round(time.monotonic() - t0, 1)
    if as_json:
        emit_json(result)
        return
    from deskside.report import print_demo

    print_demo(out, result)

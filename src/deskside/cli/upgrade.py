"""`deskside upgrade RECIPE`: a running replica set brought to the recipe as it is now, one
group at a time, with no request failing (`deskside.replicas.upgrade`); a one-group recipe
by a blue/green restart (`deskside.replicas.bluegreen`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from deskside.cli.common import JsonFlag, RecipeArg, emit_json, err, fail, out, steps
from deskside.errors import DesksideError, PlanRefused
from deskside.recipe.types import Recipe
from deskside.terminal import shown

if TYPE_CHECKING:
    from deskside.planner.plan import Plan
    from deskside.records.run import RunRecord
    from deskside.replicas.bluegreen_run import BlueGreenReport


def upgrade(
    recipe: RecipeArg,
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for each group's readiness.")
    ] = 900,
    known_hosts: Annotated[
        str | None,
        typer.Option(help="ssh: nodes: known_hosts file (default ~/.ssh/known_hosts)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Upgrade a running replica set to RECIPE (a new vLLM release, image, model revision or
    settings), one group at a time: drained at the set's gate (no new requests; the ones it
    runs finish), upgraded, proven (ready, every name answers, a short bench no slower than
    the group's own before), and put back. A group that fails its proof goes back to the
    previous recipe and the upgrade stops. A recipe without replicas (one engine group) is
    restarted blue/green: a second copy started beside the running one, the proxy switched
    to it, and proven under the live load (switched back and stopped when it fails);
    refused, with the numbers, when the plans say the nodes cannot hold both copies, and
    when clients reach the engine without the proxy."""
    from deskside.home import resolve_recipe
    from deskside.records.names import run_lock
    from deskside.replicas.upgrade import upgrade_set
    from deskside.runtime.pipeline import UpOptions

    try:
        loaded, path = resolve_recipe(recipe)
        if loaded.replicas is None:
            from deskside.replicas.bluegreen_run import blue_green

            run, plan = single_group(loaded, path, known_hosts)
            options = UpOptions(known_hosts=known_hosts, timeout=timeout)
            with run_lock(loaded.name), steps("blue/green upgrade") as say:
                single = blue_green(loaded, path, run, plan, options, progress=say)
            _single_report(single, as_json)
            return
        options = UpOptions(known_hosts=known_hosts, timeout=timeout)
        with run_lock(loaded.name), steps("upgrading") as say:
            report = upgrade_set(loaded, path, options, progress=say)
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(report.to_dict())
    else:
        for step in report.groups:
            state = "[green]upgraded[/]" if step.ok else "[red]failed[/]"
            before = step.before.median_s if step.before else None
            after = step.after.median_s if step.after else None
            out.print(
                f"group {shown(step.group)}: {state}; drained in {step.drain_seconds:.1f} s, "
                f"restarted in {step.upgrade_seconds:.1f} s; bench median "
                f"{_ms(before)} -> {_ms(after)}" + ("; rolled back" if step.rolled_back else ""),
                highlight=False,
            )
        if report.ok:
            out.print(f"{shown(report.recipe)}: upgraded in {report.seconds:.0f} s")
        else:
            err.print(f"[red]upgrade stopped:[/] {shown(report.error or '')}", highlight=False)
            if report.hint:
                err.print(f"  {shown(report.hint)}", highlight=False)
    if not report.ok:
        raise typer.Exit(report.exit_code or 1)


def single_group(recipe: Recipe, path: Path, known_hosts: str | None) -> tuple[RunRecord, Plan]:
    """A recipe without replicas: whether its nodes can hold a second copy of the engine
    beside the running one and the proxy can switch to it (`deskside.replicas.bluegreen`);
    refused, saying why. Returns the run and the new recipe's plan."""
    from deskside.planner.inputs import plan_recipe
    from deskside.recipe.load import load_recipe
    from deskside.records.run import load_run
    from deskside.replicas.bluegreen import blue_green_refusal
    from deskside.replicas.upgrade import running_recipe

    run = load_run(recipe.name)
    if run is None:
        raise DesksideError(f"{recipe.name} is not up", hint=f"start it first: deskside up {path}")
    green = plan_recipe(recipe, path)
    if not green.fits:
        raise PlanRefused(f"deskside refuses the upgrade: {green.refusal}")
    blue_recipe, blue_path = running_recipe(recipe.name), Path(run.recipe)
    if blue_recipe is None:
        blue_recipe = load_recipe(blue_path) if blue_path.is_file() else recipe
    blue = plan_recipe(blue_recipe, blue_path if blue_path.is_file() else path)
    refusal = blue_green_refusal(recipe, blue, green, known_hosts, allow_downtime=False)
    if refusal is not None:
        raise refusal
    if run.runtime != "local":
        raise DesksideError(
            f"{recipe.name} has no replicas: the nodes have room for a second copy of the "
            "engine, but a blue/green restart is done by deskside only on this machine's nodes "
            "yet",
            hint="add a second group (replicas:) to upgrade with no request failing, or run "
            "deskside down and deskside up",
        )
    return run, green


def _single_report(report: BlueGreenReport, as_json: bool) -> None:
    if as_json:
        emit_json(report.to_dict())
    elif report.ok:
        before = report.before.median_s if report.before else None
        after = report.after.median_s if report.after else None
        out.print(
            f"{shown(report.recipe)}: blue/green upgraded in {report.seconds:.0f} s; now served "
            f"by {shown(report.green)} (was {shown(report.blue)}); bench median "
            f"{_ms(before)} -> {_ms(after)}",
            highlight=False,
        )
    else:
        err.print(f"[red]upgrade stopped:[/] {shown(report.error or '')}", highlight=False)
        if report.hint:
            err.print(f"  {shown(report.hint)}", highlight=False)
    if not report.ok:
        raise typer.Exit(report.exit_code or 1)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"

"""`deskside upgrade RECIPE`: a running replica set brought to the recipe as it is now, one
group at a time, with no request failing (`deskside.replicas.upgrade`)."""

from __future__ import annotations

from typing import Annotated

import typer

from deskside.cli.common import JsonFlag, RecipeArg, emit_json, err, fail, out, steps
from deskside.errors import DesksideError
from deskside.terminal import shown


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
    previous recipe and the upgrade stops. A recipe without replicas is refused: its one
    engine group cannot serve while it restarts."""
    from deskside.home import resolve_recipe
    from deskside.records.names import run_lock
    from deskside.replicas.upgrade import upgrade_set
    from deskside.runtime.pipeline import UpOptions

    try:
        loaded, path = resolve_recipe(recipe)
        if loaded.replicas is None:
            raise DesksideError(
                f"{loaded.name} has no replicas: its one engine group would stop serving "
                "while it restarts",
                hint="a blue/green restart of one group is not done by deskside yet; add a "
                "second group (replicas:) to upgrade with no request failing, or run "
                "deskside down and deskside up",
            )
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


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"

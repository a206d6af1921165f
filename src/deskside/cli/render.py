"""`deskside render RECIPE --out DIR` and `deskside diff RECIPE --against LOCK`: a thin face
over `deskside.render` and `deskside.render.lock`. Registered in deskside.cli without a group
name, so both are top-level commands."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from deskside.cli.common import JsonFlag, RecipeArg, emit_json, err, fail, out
from deskside.errors import DesksideError, PlanRefused
from deskside.terminal import shown

if TYPE_CHECKING:
    from deskside.recipe.types import Recipe
    from deskside.render.bundle import Bundle
    from deskside.render.lock import HostDiff

app = typer.Typer()

FIX_HINT = "fix the recipe (see `deskside plan`), or pass --force to render anyway"


def _render(recipe_arg: str, force: bool, one_engine: bool = False) -> tuple[Recipe, Path, Bundle]:
    from deskside.home import resolve_recipe
    from deskside.planner.inputs import plan_recipe
    from deskside.render.assemble import render as render_bundle

    recipe, path = resolve_recipe(recipe_arg)
    if one_engine:
        from deskside.recipe.groups import refuse_replica_set

        refuse_replica_set(recipe, "diff")
    if recipe.replicas is not None:
        from deskside.replicas.plans import plan_set, set_refusal
        from deskside.replicas.render import render_set

        plans = plan_set(recipe, path)
        refusal = set_refusal(plans)
        if refusal is not None and not force:
            raise PlanRefused(refusal, hint=FIX_HINT)
        return recipe, path, render_set(recipe, path, plans)
    plan = plan_recipe(recipe, path)
    if not plan.fits and not force:
        raise PlanRefused(plan.refusal or "the plan does not fit", hint=FIX_HINT)
    return recipe, path, render_bundle(recipe, path, plan)


@app.command()
def render(
    recipe: RecipeArg,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write the bundle into.")],
    force: Annotated[bool, typer.Option(help="Render even when the plan does not fit.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Render every file of the deployment: one folder per node (compose.yaml, node.env,
    launch.sh, systemd unit) and cluster/ (proxy, Prometheus, Grafana, deskside.lock)."""
    from deskside.secrets import PROXY_MASTER_KEY, proxy_master_key, secrets_dir

    try:
        loaded, _, bundle = _render(recipe, force)
        written = bundle.write(out_dir)
        key_file = None
        if loaded.runs_proxy and loaded.proxy.master_key_file is None:
            # generated once, kept 0600 beside deskside's state; the deploy copies it
            proxy_master_key(loaded.name)
            key_file = secrets_dir(loaded.name) / PROXY_MASTER_KEY
    except DesksideError as exc:
        fail(exc, as_json)
    files = [
        {"path": p, "sha256": bundle.sha256(p), "mode": f"{bundle.mode(p):04o}", "bytes": len(b)}
        for p, b in bundle.items()
    ]
    if as_json:
        emit_json(
            {
                "recipe": loaded.name,
                "out": str(out_dir),
                "files": files,
                "notes": bundle.notes,
                "proxy_master_key_file": str(key_file) if key_file else None,
            }
        )
        return
    title = f"{shown(loaded.name)}: {len(written)} files in {shown(out_dir)}"
    table = Table(title=title, title_justify="left")
    table.add_column("file")
    table.add_column("mode")
    table.add_column("bytes", justify="right")
    table.add_column("sha256")
    for f in files:
        table.add_row(
            shown(f["path"]), shown(f["mode"]), shown(f["bytes"]), shown(str(f["sha256"])[:12])
        )
    out.print(table)
    for note in bundle.notes:
        err.print(f"[yellow]note:[/] {shown(note)}", highlight=False)
    if key_file is not None:
        out.print(
            f"proxy master key: kept in {shown(key_file)} (mode 0600, not printed)", highlight=False
        )


@app.command()
def diff(
    recipe: RecipeArg,
    against: Annotated[
        Path | None,
        typer.Option(
            help="The deployed lock: a deskside.lock file, or a rendered bundle folder. "
            "None: compare with nothing deployed."
        ),
    ] = None,
    force: Annotated[bool, typer.Option(help="Render even when the plan does not fit.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Per host, what applying the recipe's bundle over a deployed one would change.
    Exits 1 when something would change (like diff(1)), 0 when all is up to date."""
    from deskside.render.lock import diff as diff_locks
    from deskside.render.lock import read_lock

    try:
        old = read_lock(against) if against is not None else None
        _, _, bundle = _render(recipe, force, one_engine=True)
        result = diff_locks(old, bundle)
    except DesksideError as exc:
        fail(exc, as_json)
    changed = any(h.changes_anything for h in result)
    if as_json:
        emit_json({"changes": changed, "hosts": [h.model_dump(mode="json") for h in result]})
    else:
        _print_diff(result)
    if changed:
        raise typer.Exit(1)


def _print_diff(result: list[HostDiff]) -> None:
    for host in result:
        role = f" ({host.role})" if host.role else ""
        if not host.changes_anything:
            out.print(
                f"[green]{shown(host.host)}[/]{shown(role)}: up to date ({host.unchanged} files)"
            )
            continue
        action = "restart engine" if host.restart_engine else "no engine restart"
        if host.reload:
            action += "; reload " + ", ".join(host.reload)
        out.print(f"[yellow]{shown(host.host)}[/]{shown(role)}: {shown(action)}", highlight=False)
        for label, paths in (("+", host.added), ("-", host.removed), ("~", host.changed)):
            for path in paths:
                out.print(f"  {label} {shown(path)}", highlight=False)
        for value in host.values:
            out.print(f"  [dim]{shown(value)}[/]", highlight=False)

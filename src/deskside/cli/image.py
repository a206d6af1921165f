"""`deskside image sync`: the engine image, by digest, on every node (deskside.images)."""

from __future__ import annotations

from typing import Annotated

import typer

from deskside.cli.common import JsonFlag, RecipeArg, emit_json, fail, out, steps
from deskside.errors import DesksideError, UsageError
from deskside.terminal import shown
from deskside.units import format_bytes

app = typer.Typer(
    help="The engine image on every node, by digest.",
    no_args_is_help=True,
)


@app.callback()
def _image() -> None:
    """The engine image on every node, by digest."""


@app.command()
def sync(
    recipe: RecipeArg,
    source: Annotated[
        str,
        typer.Option(
            "--from",
            help="head: stream the head's image to each worker over the fabric (docker save | "
            "ssh | docker load; needs `deskside setup`); registry: every node pulls it.",
        ),
    ] = "head",
    known_hosts: Annotated[
        str | None,
        typer.Option(help="ssh: nodes: known_hosts file (default ~/.ssh/known_hosts)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Put the recipe's engine image (engine.image, pinned by digest) on every node, and
    check each by digest afterwards: its Docker resolves the pinned reference to the head's
    image. Exits 1 when a node does not hold it."""
    from deskside.home import resolve_recipe
    from deskside.images.sync import Source
    from deskside.images.sync import sync as run_sync
    from deskside.runtime.transports import transport_for

    try:
        if source not in ("head", "registry"):
            raise UsageError(f"--from must be head or registry, not {source!r}")
        chosen: Source = "head" if source == "head" else "registry"
        loaded, path = resolve_recipe(recipe, make_model=False)
        ts = {n.name: transport_for(n, known_hosts) for n in loaded.cluster.nodes}
        if as_json:
            head, results = run_sync(loaded, ts, chosen, recipe_file=str(path))
        else:
            with steps(f"image sync from the {source}") as say:
                head, results = run_sync(loaded, ts, chosen, say, recipe_file=str(path))
    except DesksideError as exc:
        fail(exc, as_json)
    ok = all(r.ok for r in results)
    if as_json:
        emit_json(
            {
                "ok": ok,
                "image": loaded.engine.image,
                "image_id": head.pinned,
                "bytes": head.size,
                "from": source,
                "nodes": [r.to_dict() for r in results],
            }
        )
    else:
        for r in results:
            mark = "[green]ok[/]" if r.ok else "[red]not in sync[/]"
            how = {
                "already": "already held",
                "loaded": f"loaded from the head ({format_bytes(r.bytes)}, {r.seconds:.1f} s)",
                "pulled": f"pulled ({r.seconds:.1f} s)",
            }.get(r.action, r.action)
            image = f", image {r.image.removeprefix('sha256:')[:12]}" if r.image else ""
            out.print(f"{mark} {shown(r.node)}: {how}{image}", highlight=False)
            for p in r.problems:
                out.print(f"  [red]-[/] {shown(p)}", highlight=False)
            for h in r.hints:
                out.print(f"  [dim]hint:[/] {shown(h)}", highlight=False)
    if not ok:
        raise typer.Exit(1)

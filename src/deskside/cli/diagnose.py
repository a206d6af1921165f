"""`deskside diagnose RECIPE --out DIR`: a thin face over deskside.diagnose.bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from deskside.cli.common import JsonFlag, RunArg, emit_json, err, fail, out
from deskside.errors import DesksideError
from deskside.terminal import shown


def diagnose(
    out_dir: Annotated[
        Path,
        typer.Option("--out", help="Folder to write the bundle into (made, mode 0700, if new)."),
    ],
    recipe: RunArg = None,
    reason: Annotated[
        str | None, typer.Option(help="Why the bundle is made (kept in MANIFEST.json).")
    ] = None,
    known_hosts: Annotated[
        str | None,
        typer.Option(
            help="ssh: nodes: known_hosts file (default: the run's, else ~/.ssh/known_hosts)."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Write one tar.gz of what tells why a run misbehaves: per node the engine log's end,
    the engine's process tree with every thread's state, the stacks of every engine process
    (py-spy when the node has it, kernel stacks as root) and the exporter's metrics; the
    head's /metrics, status, plan, lock, fabric and doctor findings. The run's secrets are
    scrubbed out; a piece that cannot be collected is listed in MANIFEST.json."""
    from deskside.diagnose.bundle import write_bundle
    from deskside.records.names import find_run, recipe_file_named
    from deskside.runtime.transports import transport_for

    def progress(message: str) -> None:
        err.print(f"[dim]{shown(message)}[/]", highlight=False)

    try:
        run = find_run(recipe)
        recipe_path = recipe_file_named(recipe) if recipe is not None else None
        transports = (
            {n.name: transport_for(n, known_hosts) for n in run.nodes} if known_hosts else None
        )
        report = write_bundle(
            run,
            out_dir,
            transports=transports,
            reason=reason,
            progress=None if as_json else progress,
            recipe_path=recipe_path,
        )
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(report.to_dict())
        return
    out.print(f"bundle: {shown(report.path)} ({len(report.members)} members)", highlight=False)
    for error in report.errors:
        err.print(f"[yellow]not collected:[/] {shown(error)}", highlight=False)

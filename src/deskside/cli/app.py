"""The `deskside` command: a thin face over the library. Each command parses its flags,
calls one library function, and prints a rich summary or, with --json, one JSON object."""

from __future__ import annotations

import os
import sys
import traceback

import typer

from deskside.cli import bench, fabric, plan, recipe, render, run
from deskside.cli.common import err, fail
from deskside.errors import DesksideError

app = typer.Typer(
    name="deskside",
    help="Serve frontier LLMs across a few deskside GPU nodes with vLLM - planned exactly, "
    "launched in order, and proven.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command()(plan.plan)
app.command()(run.up)
app.command()(run.down)
app.command()(run.status)
app.command()(run.logs)
app.command()(run.demo)
app.command()(recipe.schema)
app.command()(recipe.validate)
app.add_typer(recipe.model_app, name="model")
app.add_typer(fabric.app, name="fabric")
app.add_typer(bench.app, name="bench")
app.add_typer(render.app)  # `render` and `diff`, top-level


def main() -> None:
    """Console entry point: user errors print without a traceback; internal errors say
    how to get one."""
    try:
        app()
    except DesksideError as exc:  # raised outside a command's own handling
        try:
            fail(exc)
        except typer.Exit as done:
            sys.exit(done.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # a bug of ours, not the user's mistake
        if os.environ.get("DESKSIDE_DEBUG"):
            traceback.print_exc()
        err.print(
            f"[bold red]internal error:[/] {type(exc).__name__}: {exc}\n"
            "  [dim]hint:[/] this is a deskside bug; rerun with DESKSIDE_DEBUG=1 for the "
            "traceback and report it",
            highlight=False,
        )
        sys.exit(70)


if __name__ == "__main__":
    main()

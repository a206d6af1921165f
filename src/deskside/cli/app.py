"""The `deskside` command: a thin face over the library. Each command parses its flags,
calls one library function, and prints a rich summary or, with --json, one JSON object."""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback
from types import FrameType

import typer

from deskside.cli import (
    bench,
    diagnose,
    doctor,
    exporter,
    fabric,
    guard,
    monitor,
    plan,
    probe,
    proxy,
    recipe,
    render,
    run,
    watch,
)
from deskside.cli.common import err, fail, shown
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
app.add_typer(proxy.app, name="proxy")
app.add_typer(monitor.app, name="monitor")
app.command()(monitor.top)
app.add_typer(render.app)  # `render` and `diff`, top-level
app.command()(exporter.exporter)
app.command()(doctor.doctor)
app.command()(guard.guard)
app.command()(watch.watch)
app.command()(diagnose.diagnose)
app.command()(probe.probe)


class Interrupted(BaseException):
    """Ctrl-C (SIGINT) while a command runs. Not a KeyboardInterrupt, which click turns
    into "Aborted!" and exit 1; not an Exception, so no `except Exception` swallows it,
    while `finally` blocks and `except BaseException: undo; raise` still run."""


def _interrupted(signum: int, frame: FrameType | None) -> None:
    # a second Ctrl-C while the first one's clean-up runs: leave at once
    signal.signal(signal.SIGINT, _interrupted_again)
    raise Interrupted


def _interrupted_again(signum: int, frame: FrameType | None) -> None:
    sys.stderr.write("interrupted again: exiting without cleaning up\n")
    sys.stderr.flush()
    os._exit(130)


def main() -> None:
    """Console entry point: user errors print without a traceback; internal errors say
    how to get one; Ctrl-C prints "interrupted" and exits 130."""
    if threading_main():
        signal.signal(signal.SIGINT, _interrupted)
    try:
        app()
    except DesksideError as exc:  # raised outside a command's own handling
        try:
            fail(exc)
        except typer.Exit as done:
            sys.exit(done.exit_code)
    except (Interrupted, KeyboardInterrupt):
        signal.signal(signal.SIGINT, _interrupted_again)
        err.print("interrupted", highlight=False)
        sys.exit(130)
    except Exception as exc:  # a bug of ours, not the user's mistake
        if os.environ.get("DESKSIDE_DEBUG"):
            traceback.print_exc()
        err.print(
            f"[bold red]internal error:[/] {type(exc).__name__}: {shown(exc)}\n"
            "  [dim]hint:[/] this is a deskside bug; rerun with DESKSIDE_DEBUG=1 for the "
            "traceback and report it",
            highlight=False,
        )
        sys.exit(70)


def threading_main() -> bool:
    """Whether this is the main thread (the only one that may set signal handlers)."""
    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":
    main()

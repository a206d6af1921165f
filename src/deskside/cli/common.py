"""What every command shares: the consoles, the `--json` flag and its output, `shown`, and
`fail`, which prints a user's mistake (what, where, how to fix it) and exits with its code.

Text deskside did not write itself (recipe and node names, paths, error messages, hints,
log lines) goes through `shown` before it reaches a console: Rich markup in it prints
literally (`[bold]x[/]` stays those characters), and so do control characters (an ESC
prints as the four characters `\x1b`, never as a terminal escape). The consoles never
turn `:name:` codes into emoji.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console

from deskside.errors import DesksideError, RecipeError, UsageError
from deskside.terminal import literal, shown

Say = Callable[[str], None]

out = Console(soft_wrap=True, emoji=False)
err = Console(stderr=True, soft_wrap=True, emoji=False)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
RecipeArg = Annotated[str, typer.Argument(help="Recipe file, or an embedded recipe's name.")]
RunArg = Annotated[
    str | None,
    typer.Argument(
        help="The run: its name, or the recipe file it was started from (optional when only "
        "one run is up here).",
        show_default=False,
    ),
]
OldRunOpt = Annotated[
    str | None,
    typer.Option("--recipe", hidden=True, help="Deprecated: name the run as the argument."),
]

T = TypeVar("T")


def emit_json(data: Any, indent: int | None = 2) -> None:
    """One JSON object on stdout (values JSON does not know are written as text)."""
    sys.stdout.write(json.dumps(data, indent=indent, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def fail(error: DesksideError, as_json: bool = False) -> NoReturn:
    """Print a user-facing error (never a traceback) and exit with its code."""
    if as_json:
        emit_json(error.to_dict())
    elif isinstance(error, RecipeError):
        from deskside.recipe.load import format_recipe_error

        err.print(literal(format_recipe_error(error)), markup=False, highlight=False)
    else:
        where = f"{shown(error.location)}: " if error.location else ""
        err.print(f"[bold red]error:[/] {where}{shown(error.message)}", highlight=False)
        if error.hint:
            err.print(f"  [dim]hint:[/] {shown(error.hint)}", highlight=False)
    raise typer.Exit(error.exit_code)


def chosen_run(run: str | None, old: str | None) -> str | None:
    """The run a command names: its argument, or the deprecated `--recipe NAME` (kept for
    one release, with a note on stderr)."""
    if old is None:
        return run
    err.print(
        "[dim]note:[/] --recipe is deprecated: name the run as the command's argument",
        highlight=False,
    )
    if run is not None and run != old:
        raise UsageError(f"the run is named twice: {run!r} and --recipe {old!r}")
    return old


def parse_option(fn: Callable[[str], T], value: str | None, flag: str) -> T | None:
    """`fn(value)` for an option given as text; a ValueError becomes a UsageError naming
    the flag."""
    if value is None:
        return None
    try:
        return fn(value)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


@contextlib.contextmanager
def steps(first: str, *, clock: bool = True) -> Iterator[Say]:
    """Show a long command's steps as they come: a spinner line on a terminal; anywhere
    else (a log file, a pipe, CI) one plain line per step on stderr, each with the seconds
    since the start, so a log shows where the time went. Yields the function to call with
    each step's message."""
    t0 = time.monotonic()

    def since() -> str:
        return f"{time.monotonic() - t0:.0f} s"

    if err.is_terminal:
        with err.status(shown(first)) as spinner:
            yield lambda msg: spinner.update(f"{shown(msg)} ({since()})" if clock else shown(msg))
        return
    last: list[str] = []

    def say(msg: str) -> None:
        if last and last[-1] == msg:
            return
        last[:] = [msg]
        stamp = f"[{since():>6}] " if clock else ""
        err.print(f"{stamp}{literal(msg, multiline=False)}", markup=False, highlight=False)

    say(first)
    yield say

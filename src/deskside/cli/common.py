"""What every command shares: the consoles, the `--json` flag and its output, and `fail`,
which prints a user's mistake (what, where, how to fix it) and exits with its code."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console

from deskside.errors import DesksideError, RecipeError, UsageError
from deskside.recipe.load import format_recipe_error

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
RecipeArg = Annotated[str, typer.Argument(help="Recipe file, or an embedded recipe's name.")]
RunOpt = Annotated[
    str | None, typer.Option("--recipe", help="Which run (recipe name), when several are up.")
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
        err.print(format_recipe_error(error), markup=False, highlight=False)
    else:
        where = f"{error.location}: " if error.location else ""
        err.print(f"[bold red]error:[/] {where}{error.message}", highlight=False)
        if error.hint:
            err.print(f"  [dim]hint:[/] {error.hint}", highlight=False)
    raise typer.Exit(error.exit_code)


def parse_option(fn: Callable[[str], T], value: str | None, flag: str) -> T | None:
    """`fn(value)` for an option given as text; a ValueError becomes a UsageError naming
    the flag."""
    if value is None:
        return None
    try:
        return fn(value)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None

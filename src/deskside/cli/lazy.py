"""A command group that imports a command's module only when that command runs.

`deskside --help` lists every command from a static table (name, one line of help, its
panel) without importing any of them; `deskside plan ...` imports the plan command's module
and nothing of `bench`, `fabric` or the exporter. Each entry names a module and an
attribute: a function (one command, its docstring the help) or a Typer app (a group).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer import _click as click  # typer vendors its own click
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class Entry:
    """One command of a lazy group: `module:attr` is a function or a `typer.Typer`."""

    name: str
    target: str  # "deskside.cli.plan:plan"
    help: str  # the line `--help` shows
    panel: str | None = None
    group: bool = False  # the target is a Typer app
    hidden: bool = False
    deprecated: str | None = None  # shown when a hidden old spelling is used


def load(entry: Entry) -> click.Command:
    """The real click command of `entry` (imports its module)."""
    module, _, attr = entry.target.partition(":")
    target: Any = getattr(importlib.import_module(module), attr)
    command: click.Command
    if entry.group:
        command = typer.main.get_group(target)
    else:
        one = typer.Typer(add_completion=False)
        one.command(
            name=entry.name,
            hidden=entry.hidden,
            rich_help_panel=entry.panel,
            deprecated=bool(entry.deprecated),
        )(target)
        command = typer.main.get_command(one)
    command.name = entry.name
    command.hidden = entry.hidden
    if entry.deprecated:
        note = entry.deprecated
        original = command.invoke

        def invoke(ctx: click.Context) -> Any:
            typer.echo(f"deskside {entry.name} is deprecated: {note}", err=True)
            return original(ctx)

        command.invoke = invoke  # type: ignore[method-assign]
        command.deprecated = False  # the note above says it once, in deskside's words
    return command


def stub(entry: Entry) -> click.Command:
    """What `--help` lists for `entry`: its name, help line and panel, nothing imported."""
    return TyperCommand(
        entry.name,
        help=entry.help,
        short_help=entry.help,
        hidden=entry.hidden,
        rich_help_panel=entry.panel,
    )


class LazyGroup(TyperGroup):
    """A group whose commands come from `entries`, each imported when it is resolved."""

    entries: tuple[Entry, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: dict[str, click.Command] = {}

    def _entry(self, name: str) -> Entry | None:
        return next((e for e in self.entries if e.name == name), None)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [e.name for e in self.entries]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._loaded:
            return self._loaded[cmd_name]
        entry = self._entry(cmd_name)
        return None if entry is None else stub(entry)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        entry = self._entry(str(args[0])) if args else None
        if entry is not None and entry.name not in self._loaded:
            self._loaded[entry.name] = load(entry)
        return super().resolve_command(ctx, args)


def lazy_group(*entries: Entry) -> type[LazyGroup]:
    """A `LazyGroup` class over `entries` (for `typer.Typer(cls=...)`)."""
    return type("Lazy", (LazyGroup,), {"entries": tuple(entries)})

"""`deskside setup RECIPE`: the nodes' day-0 configuration, shown before it is made
(deskside.setup)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from deskside.cli.common import JsonFlag, RecipeArg, emit_json, fail, out, steps
from deskside.errors import DesksideError, UsageError
from deskside.terminal import shown

if TYPE_CHECKING:
    from deskside.setup.changes import NodeChanges

KnownHosts = Annotated[
    str | None, typer.Option(help="known_hosts file for the nodes (default ~/.ssh/known_hosts).")
]


def _changes_dict(c: NodeChanges) -> dict[str, Any]:
    return {
        "steps": [
            {"kind": s.kind, "path": s.path, "what": s.what, "text": s.text} for s in c.steps
        ],
        "unchanged": c.unchanged,
        "problems": [{"what": w, "fix": f} for w, f in c.problems],
        "kept": c.kept,
    }


def _print_changes(changes: dict[str, NodeChanges], undo: bool) -> None:
    for name, c in changes.items():
        out.print(f"[bold]{shown(name)}[/]", highlight=False)
        for what, fix in c.problems:
            out.print(f"  [red]problem:[/] {shown(what)}", highlight=False)
            out.print(f"    [dim]hint:[/] {shown(fix)}", highlight=False)
        for s in c.steps:
            out.print(
                f"  [yellow]{s.kind}[/] {shown(s.path)}  [dim]{shown(s.what)}[/]", highlight=False
            )
            if s.kind in ("write", "rewrite"):
                for line in s.text.splitlines():
                    out.print(f"      {shown(line)}", highlight=False)
            elif s.kind in ("add-line", "remove-line"):
                out.print(f"      {shown(s.text)}", highlight=False)
        for u in c.unchanged:
            out.print(f"  [green]unchanged[/] {shown(u)}", highlight=False)
        for k in c.kept:
            out.print(f"  [dim]kept[/] {shown(k)}", highlight=False)
        if not (c.problems or c.steps or c.unchanged or c.kept):
            out.print("  nothing recorded" if undo else "  nothing to do", highlight=False)


def setup(
    recipe: RecipeArg,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the changes; make none.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Make the changes without asking.")] = False,
    undo: Annotated[
        bool,
        typer.Option(
            "--undo",
            help="Remove what setup wrote (each file only while it is unchanged since), "
            "and disable the units it enabled.",
        ),
    ] = False,
    mtu: Annotated[
        int | None,
        typer.Option(min=576, max=9216, help="Fabric MTU (default cluster.fabric.mtu, else 9000)."),
    ] = None,
    prefix_length: Annotated[
        int | None,
        typer.Option(min=8, max=32, help="Prefix length of the fabric addresses (default 24)."),
    ] = None,
    gpu_clock: Annotated[
        int | None,
        typer.Option(min=100, max=5000, help="Lock the GPU clocks at this many MHz at every boot."),
    ] = None,
    known_hosts: KnownHosts = None,
    as_json: JsonFlag = False,
) -> None:
    """Configure every node for its first day: the fabric interface's address and MTU
    (systemd-networkd, or netplan where the node uses it), SSH from the head to every worker
    (a key of its own, pinned host keys, agent forwarding off), an optional GPU clock cap.
    Every change is shown before it is made; a second run changes nothing. Each file
    written is recorded on its node, so --undo removes exactly those."""
    from deskside.home import resolve_recipe
    from deskside.runtime.transports import transport_for
    from deskside.setup import apply as ap
    from deskside.setup.wanted import options_for

    try:
        if as_json and not (dry_run or yes):
            raise UsageError("--json makes changes only with --yes", hint="add --yes, or --dry-run")
        loaded, path = resolve_recipe(recipe, make_model=False)
        ts = {n.name: transport_for(n, known_hosts) for n in loaded.cluster.nodes}
        if undo:
            _undo(loaded, ts, dry_run, yes, as_json)
            return
        options = options_for(loaded, mtu, prefix_length, gpu_clock)
        if as_json:
            s = ap.survey(loaded, path, ts, options)
        else:
            with steps(f"reading {len(ts)} node(s)") as say:
                s = ap.survey(loaded, path, ts, options)
        before = {k: _changes_dict(v) for k, v in s.changes.items()}
        if not as_json:
            _print_changes(s.changes, undo=False)
            for note in s.notes:
                out.print(f"[dim]note:[/] {shown(note)}", highlight=False)
        if s.problems:
            if as_json:
                emit_json({"ok": False, "changed": False, "nodes": before, "notes": s.notes})
            else:
                out.print(f"[red]{len(s.problems)} problem(s): nothing changed[/]")
            raise typer.Exit(1)
        if s.steps == 0:
            if as_json:
                emit_json({"ok": True, "changed": False, "nodes": before, "notes": s.notes})
            else:
                out.print("[green]nothing to change[/]: every node is as setup leaves it")
            return
        if dry_run:
            if as_json:
                emit_json(
                    {
                        "ok": True,
                        "changed": False,
                        "dry_run": True,
                        "nodes": before,
                        "notes": s.notes,
                    }
                )
            else:
                out.print(f"dry run: {s.steps} change(s) shown, none made")
            return
        _confirm(yes, f"make these {s.steps} change(s)?")
        if as_json:
            after = ap.apply(s, ts)
        else:
            with steps("applying") as say:
                after = ap.apply(s, ts, say)
        left = after.steps
        ok = left == 0 and not after.problems
        if as_json:
            emit_json({"ok": ok, "changed": True, "nodes": before, "notes": s.notes})
        elif ok:
            out.print(
                f"[green]done[/]: {s.steps} change(s) made and recorded; "
                "a second run changes nothing"
            )
        else:
            _print_changes(after.changes, undo=False)
            out.print("[red]some changes did not take[/]")
        if not ok:
            raise typer.Exit(1)
    except DesksideError as exc:
        fail(exc, as_json)


def _confirm(yes: bool, question: str) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise UsageError("not asked: stdin is not a terminal", hint="add --yes to make the changes")
    if not typer.confirm(question, default=False):
        raise typer.Exit(1)


def _undo(loaded: Any, ts: Any, dry_run: bool, yes: bool, as_json: bool) -> None:
    from deskside.setup import apply as ap

    u = ap.undo_survey(loaded, ts)
    data = {k: _changes_dict(v) for k, v in u.changes.items()}
    count = sum(len(c.steps) for c in u.changes.values())
    if not as_json:
        _print_changes(u.changes, undo=True)
    if not any(u.records.values()):
        if as_json:
            emit_json({"ok": True, "changed": False, "nodes": data})
        else:
            out.print("nothing to undo: setup recorded nothing on these nodes")
        return
    if dry_run:
        if as_json:
            emit_json({"ok": True, "changed": False, "dry_run": True, "nodes": data})
        else:
            out.print(f"dry run: {count} change(s) shown, none made")
        return
    _confirm(yes, f"undo these {count} change(s)?")
    if as_json:
        ap.undo(loaded, ts, u)
        emit_json({"ok": True, "changed": True, "nodes": data})
    else:
        with steps("undoing") as say:
            ap.undo(loaded, ts, u, say)
        out.print(f"[green]done[/]: {count} change(s) undone")

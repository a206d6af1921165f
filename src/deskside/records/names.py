"""Which run or replica set a command means.

Every command that works on something running takes the same argument, optional when
only one thing runs (like `docker compose` and `kubectl`): `resolve(arg)` gives the run or
the replica set `arg` names — a run's name, a set's name, or the recipe file either was
started from — and, without `arg`, the one thing that runs here (a replica set counts
once, not once per group). Its refusals say what is wrong and what to type instead:
nothing runs, several do (each named), no run has that name. `find_run` is the same for a
command that works on one engine: given a replica set it names the set's groups.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from deskside.errors import DesksideError, UsageError
from deskside.home import embedded_recipes, resolve_recipe, runs_dir
from deskside.locks import Held, hold
from deskside.records.replica_set import SetRecord, load_set
from deskside.records.run import RunRecord, load_run
from deskside.records.where import (
    RUN_FILE,
    RUN_NAME_RE,
    SET_FILE,
    check_run_name,
    run_file,
    run_lock_file,
    set_file,
)

START_HINT = "start a cluster: deskside up RECIPE"
NAME_HINT = "name one after the command, e.g. `deskside status NAME`"


def _names_with(record_file: str) -> list[str]:
    """The folders under runs/ holding `record_file` (a folder deskside cannot have named
    is not a run)."""
    if not runs_dir().is_dir():
        return []
    found = (p.parent.name for p in runs_dir().glob(f"*/{record_file}"))
    return sorted(name for name in found if RUN_NAME_RE.fullmatch(name))


def run_names() -> list[str]:
    """The runs recorded here (a replica set's groups each count)."""
    return _names_with(RUN_FILE)


def set_names() -> list[str]:
    """The replica sets recorded here."""
    return _names_with(SET_FILE)


def running_names() -> list[str]:
    """What runs here, as a command names it: each replica set once, each run that is not
    a group of a recorded set. BadState for a set record deskside cannot trust."""
    grouped: set[str] = set()
    sets = []
    for name in set_names():
        record = load_set(name)
        if record is not None:
            sets.append(name)
            grouped |= set(record.group_runs())
    return sorted([*sets, *(r for r in run_names() if r not in grouped)])


def _known() -> str:
    try:
        names = running_names()
    except DesksideError:
        names = run_names()
    return ", ".join(names) or "none"


def only_run_name() -> str:
    """The one run folder there is (its records may be unreadable: `down --forget`)."""
    names = (
        sorted(p.name for p in runs_dir().iterdir() if p.is_dir()) if runs_dir().is_dir() else []
    )
    if len(names) != 1:
        raise UsageError(
            "name the run to forget: deskside down --forget NAME",
            hint="runs: " + (", ".join(names) or "none"),
        )
    return names[0]


def _recorded(name: str) -> bool:
    return os.path.lexists(run_file(name)) or os.path.lexists(set_file(name))


def is_replica_set(name: str) -> bool:
    """Whether `name` is recorded as a replica set (its record is not read)."""
    return os.path.lexists(set_file(name))


def _recipe_file(arg: str) -> Path | None:
    path = Path(arg)
    return path if os.path.lexists(path) and not path.is_dir() else None


def running_name(arg: str | None = None) -> str:
    """The name of the run or replica set `arg` means (see the module docstring). Only
    the names there are and the sets' records are read, not a run's record: a command
    that locks the run reads that under its lock."""
    if arg is None:
        names = running_names()
        if not names:
            raise DesksideError("nothing is running", hint=START_HINT)
        if len(names) > 1:
            raise DesksideError(f"several runs: {', '.join(names)}", hint=NAME_HINT)
        return names[0]
    if RUN_NAME_RE.fullmatch(arg) and _recorded(arg):
        return arg
    if (path := _recipe_file(arg)) is not None:
        recipe, _ = resolve_recipe(path, make_model=False)
        if not _recorded(recipe.name):
            raise DesksideError(
                f"{recipe.name} is not running here (no run of it; recipe file {path})",
                hint=f"start it: deskside up {arg} (running here: {_known()})",
            )
        return recipe.name
    check_run_name(arg)
    if arg in embedded_recipes():
        raise DesksideError(
            f"{arg} is not running here (no run of it)",
            hint=f"start it: deskside up {arg} (running here: {_known()})",
        )
    raise DesksideError(
        f"no run named {arg!r}, and no recipe file there",
        hint=f"name a run (running here: {_known()}) or the recipe file it started from",
    )


def resolve(arg: str | None = None) -> RunRecord | SetRecord:
    """The run or replica set `arg` names (see the module docstring); without `arg`, the
    one that runs here. BadState for a record deskside cannot trust."""
    name = running_name(arg)
    found: RunRecord | SetRecord | None = load_set(name) if is_replica_set(name) else None
    found = found or load_run(name)
    if found is None:  # removed meanwhile
        raise DesksideError(f"{name} is not running here any more", hint=START_HINT)
    return found


def recipe_file_named(arg: str) -> Path | None:
    """The recipe file `arg` names when it names no recorded run or set (`resolve` then
    reads the recipe there); None otherwise."""
    if RUN_NAME_RE.fullmatch(arg) and _recorded(arg):
        return None
    return _recipe_file(arg)


def find_run(arg: str | None = None) -> RunRecord:
    """The run `arg` names, or the only thing running, for a command that works on one
    engine: a replica set is refused with its groups named."""
    found = resolve(arg)
    if isinstance(found, SetRecord):
        name = found.recipe_name
        raise DesksideError(
            f"{name} is a replica set: each of its groups is a run of its own",
            hint=f"name one of its groups ({', '.join(found.group_runs())}; a group runs as "
            f"{name}-<group>); `deskside status {name}` shows them all",
        )
    return found


def run_lock(name: str) -> contextlib.AbstractContextManager[Held]:
    """One deskside at a time on a run (`up`, `down`, `down --forget`, the demo): a second
    one gets `Busy` naming the holder's pid. The lock lives beside the runs, not in the
    run's folder, which `down` empties."""
    return hold(run_lock_file(name), f"run {check_run_name(name)}")


__all__ = [
    "find_run",
    "is_replica_set",
    "only_run_name",
    "recipe_file_named",
    "resolve",
    "run_lock",
    "run_names",
    "running_name",
    "running_names",
    "set_names",
]

"""The guard's and the watcher's records in a node's state folder (beside `state.json`):
`guard.json` (`GuardRecord`) and, in the head's folder, `survive.json` (`SurviveRecord`).
Read and written through the node's Transport like the state file; the head's exporter,
which runs on the node itself, reads `survive.json` here.

Both are what deskside reports, never what it acts on: a record that is not one deskside
wrote is refused (`BadState`) like any other, and the callers report it or leave it out.
"""

from __future__ import annotations

from pathlib import Path

from deskside.records.guard import MAX_GUARD_BYTES, GuardRecord
from deskside.records.read import read_here, read_on_node
from deskside.records.survive import MAX_SURVIVE_BYTES, SurviveRecord
from deskside.records.where import guard_file, survive_file
from deskside.records.write import write_on_node
from deskside.transport.base import Transport

GUARD_WHAT = "a guard record"
SURVIVE_WHAT = "a watcher record"


def _hint(path: str) -> str:
    return f"deskside rewrites it at its next stop or look; remove it meanwhile: rm -- {path}"


def read_guard(t: Transport, recipe_dir: str) -> GuardRecord | None:
    """The guard's last stop on the node; None when it never stopped the engine there."""
    path = guard_file(recipe_dir)
    return read_on_node(t, path, GuardRecord, MAX_GUARD_BYTES, GUARD_WHAT, _hint(path))


def write_guard(t: Transport, recipe_dir: str, record: GuardRecord) -> None:
    write_on_node(t, guard_file(recipe_dir), record)


def read_survive(t: Transport, recipe_dir: str) -> SurviveRecord | None:
    """What the watcher last saw and did (the head's state folder); None: no watcher wrote."""
    path = survive_file(recipe_dir)
    return read_on_node(t, path, SurviveRecord, MAX_SURVIVE_BYTES, SURVIVE_WHAT, _hint(path))


def read_survive_here(state_dir: Path) -> SurviveRecord | None:
    """`read_survive` for a program running on the node itself (the head's exporter)."""
    path = Path(survive_file(str(state_dir)))
    return read_here(path, SurviveRecord, MAX_SURVIVE_BYTES, SURVIVE_WHAT, _hint(str(path)))


def write_survive(t: Transport, recipe_dir: str, record: SurviveRecord) -> None:
    write_on_node(t, survive_file(recipe_dir), record)


__all__ = ["read_guard", "read_survive", "read_survive_here", "write_guard", "write_survive"]

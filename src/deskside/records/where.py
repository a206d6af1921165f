"""Where every record deskside keeps lives. Paths only: nothing is read or written here.

On this machine, under $DESKSIDE_HOME:

    runs/<run>/run.json             a run: its nodes, how to reach them, its API address
    runs/<set>/replica-set.json     a replica set: its groups (each a run), its proxy
    runs/<run>/looks.jsonl          the run's series of looks (`status`, `watch`)
    runs/<run>/starts.jsonl         the run's start-ups, phase by phase (kept by `down`)
    runs/<run>/bundles/             the diagnostic bundles the watcher wrote
    runs/<run>/nodes/<node>/        the state folder of a node of a run on this machine
    locks/run-<run>.lock            one deskside at a time on a run

In a node's state folder (`R/N` = runtime.root/recipe name on a deployed node, the folder
above for a run on this machine), read and written through the node's Transport:

    state.json      what deskside started there (`deskside.records.node`; the path is
                    `deskside.layout.NodeLayout.state_file`)
    guard.json      the guard's last stop of the engine (`deskside.records.guard`)
    survive.json    what the watcher last saw and did, in the head's folder
                    (`deskside.records.survive`)
"""

from __future__ import annotations

import re
from pathlib import Path

from deskside.errors import UsageError
from deskside.home import deskside_home, runs_dir

RUN_FILE = "run.json"
SET_FILE = "replica-set.json"
LOOKS_FILE = "looks.jsonl"
STARTS_FILE = "starts.jsonl"
GUARD_FILE = "guard.json"
SURVIVE_FILE = "survive.json"
NODES_FOLDER = "nodes"
BUNDLES_FOLDER = "bundles"

# the name of a run or a replica set: a recipe name (a folder under runs/, never a path)
RUN_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def check_run_name(name: str) -> str:
    """`name` when it can name a run (UsageError otherwise: a path, an option...)."""
    if not RUN_NAME_RE.fullmatch(name):
        raise UsageError(
            f"{name!r} is not a recipe name",
            hint="recipe names are letters, digits, '.', '_' and '-' (see deskside status)",
        )
    return name


def run_dir(name: str) -> Path:
    """The folder of run (or replica set) `name` on this machine."""
    return runs_dir() / check_run_name(name)


def run_file(name: str) -> Path:
    return run_dir(name) / RUN_FILE


def set_file(name: str) -> Path:
    return run_dir(name) / SET_FILE


def looks_file(name: str) -> Path:
    return run_dir(name) / LOOKS_FILE


def starts_file(name: str) -> Path:
    return run_dir(name) / STARTS_FILE


def bundles_dir(name: str) -> Path:
    return run_dir(name) / BUNDLES_FOLDER


def local_node_dir(name: str, node: str) -> Path:
    """The state folder of node `node` of a run on this machine (its layout's root)."""
    return run_dir(name) / NODES_FOLDER / node


def run_lock_file(name: str) -> Path:
    """Beside the runs, not in the run's folder (which `down` empties)."""
    return deskside_home() / "locks" / f"run-{check_run_name(name)}.lock"


def _in_folder(recipe_dir: str, name: str) -> str:
    return f"{recipe_dir.rstrip('/')}/{name}"


def guard_file(recipe_dir: str) -> str:
    return _in_folder(recipe_dir, GUARD_FILE)


def survive_file(recipe_dir: str) -> str:
    return _in_folder(recipe_dir, SURVIVE_FILE)


__all__ = [
    "GUARD_FILE",
    "LOOKS_FILE",
    "RUN_FILE",
    "RUN_NAME_RE",
    "SET_FILE",
    "STARTS_FILE",
    "SURVIVE_FILE",
    "bundles_dir",
    "check_run_name",
    "guard_file",
    "local_node_dir",
    "looks_file",
    "run_dir",
    "run_file",
    "run_lock_file",
    "set_file",
    "starts_file",
    "survive_file",
]

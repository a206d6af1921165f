"""A run on this machine: `$DESKSIDE_HOME/runs/<recipe>/run.json`.

Which nodes a run has, how to reach them, where their state lives, the API address, and
what the run created here (network namespaces, the shared memory present before it
started). `status`, `logs` and `down` read it from any shell; they touch nothing else.
`load_run` refuses a record whose names and folders are not deskside's own for that run
(`run_problem`): nothing is stopped on its word.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from deskside.layout import STATE_FILE, NodeLayout
from deskside.localnet import bridge_name
from deskside.recipe.types import Ssh
from deskside.records.node import FORGET_HINT, ControlKind
from deskside.records.read import BadState, read_here
from deskside.records.starts import StartPhases
from deskside.records.where import (
    NODES_FOLDER,
    RUN_FILE,
    local_node_dir,
    looks_file,
    run_dir,
    run_file,
)
from deskside.records.write import write_here

ComposeProgram = Literal["docker compose", "docker-compose"]
# a namespace or link name deskside made (never an option, never a path)
LinkName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$")]
MAX_RUN_BYTES = 1024 * 1024


class RunNode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    role: str
    node_rank: int
    address: str
    ssh: Ssh | None
    netns: str | None = None
    recipe_dir: str  # the node's layout root: its state and logs live there


class LocalNetwork(BaseModel):
    """Network namespaces a run on this machine uses (deleted by `down` only when the run
    created them)."""

    model_config = ConfigDict(extra="forbid")

    bridge: LinkName
    namespaces: list[LinkName]
    created: list[LinkName]


class RunRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    recipe: str  # the recipe file
    recipe_name: str
    runtime: Literal["local", "ssh"]
    control: ControlKind
    runtime_kind: str  # native | container
    compose_program: ComposeProgram = "docker compose"
    unit: str
    compose_project: str
    api_url: str
    proxy_url: str | None
    served_names: list[str]
    planned_kv_cache_tokens: int | None = None
    planned_kv_cache_line: str | None = None
    logged_kv_cache_line: str | None = None
    known_hosts: str | None = None
    release: str | None = None
    started_at: str
    ready_at: str | None = None
    nodes: list[RunNode] = Field(min_length=1, max_length=256)
    network: LocalNetwork | None = None
    shm_before: list[str] | None = None  # local runs: /dev/shm names before the start
    # local runs: /dev/shm segments before the start, as "device:inode"
    shm_inodes: list[Annotated[str, Field(pattern=r"^[0-9]{1,20}:[0-9]{1,20}$")]] | None = Field(
        default=None, max_length=100_000
    )
    replica_set: str | None = None  # a group of this replica set (its proxy fronts it)
    engine_keyed: bool | None = None  # the head's engine requires its key; None: older record
    # engine settings laid over the recipe file (`up --overlay`, a tune point): a restart
    # re-reads the recipe file and lays them over it again
    engine_overlay: dict[str, int | float | str | dict[str, int]] | None = Field(
        default=None, max_length=16
    )
    startup: StartPhases | None = None  # the last start-up, phase by phase

    @model_validator(mode="after")
    def _one_head(self) -> RunRecord:
        heads = [n.name for n in self.nodes if n.role == "head"]
        if len(heads) != 1:
            raise ValueError(f"a run has one head node, not {len(heads)}")
        if len({n.name for n in self.nodes}) != len(self.nodes):
            raise ValueError("two nodes share a name")
        return self

    def layout(self, node: RunNode) -> NodeLayout:
        return NodeLayout.at(node.recipe_dir, self.recipe_name)

    @property
    def keyed(self) -> bool:
        """The head's engine answers /v1 only with its key (a proxy fronts it)."""
        return self.engine_keyed if self.engine_keyed is not None else self.proxy_url is not None


def run_problem(run: RunRecord, recipe_name: str) -> str | None:
    """Why `run` cannot be deskside's own record of `recipe_name`: every name and folder in
    it is re-derived from deskside's own naming and compared."""
    if run.recipe_name != recipe_name:
        return f"it names recipe {run.recipe_name!r}"
    for node in run.nodes:
        if run.runtime == "local":
            want = str(local_node_dir(recipe_name, node.name))
            if node.recipe_dir != want:
                return f"node {node.name}'s folder {node.recipe_dir!r} is not {want}"
        else:
            path = PurePosixPath(node.recipe_dir)
            if not path.is_absolute() or ".." in path.parts or path.name != recipe_name:
                return f"node {node.name}'s folder {node.recipe_dir!r} is not R/{recipe_name}"
    if run.network is not None:
        netns = sorted(n.netns for n in run.nodes if n.netns)
        if sorted(run.network.namespaces) != netns:
            return f"its namespaces {run.network.namespaces} are not the nodes' {netns}"
        if not set(run.network.created) <= set(netns):
            return f"it claims to have created namespaces {run.network.created}"
        if netns and run.network.bridge != bridge_name(netns[0]):
            return f"its bridge {run.network.bridge!r} is not {bridge_name(netns[0])!r}"
    return None


def load_run(recipe_name: str) -> RunRecord | None:
    """The run record of `recipe_name`, None when there is none; BadState when the file is
    not a record deskside wrote for that run (see `run_problem`)."""
    path = run_file(recipe_name)
    hint = FORGET_HINT.format(name=recipe_name)
    run = read_here(path, RunRecord, MAX_RUN_BYTES, "a run record", hint)
    if run is not None and (why := run_problem(run, recipe_name)) is not None:
        raise BadState(f"{path}: {why}", hint=hint)
    return run


def save_run(run: RunRecord) -> None:
    write_here(run_file(run.recipe_name), run)


def remove_run(recipe_name: str) -> None:
    """The run's record and its series of looks (diagnostic bundles stay)."""
    run_file(recipe_name).unlink(missing_ok=True)
    looks_file(recipe_name).unlink(missing_ok=True)


def forget(recipe_name: str) -> list[str]:
    """Remove deskside's own records of a run on this machine (its run record, and the
    state files of its nodes on this machine), signalling nothing; returns what went."""
    base = run_dir(recipe_name)
    removed: list[str] = []
    if base.is_symlink() or not base.is_dir():
        return removed
    nodes = base / NODES_FOLDER
    paths = [base / RUN_FILE]
    if nodes.is_dir() and not nodes.is_symlink():
        # a node folder that is a link leads elsewhere: nothing of it is deskside's
        own = [p for p in sorted(nodes.iterdir()) if p.is_dir() and not p.is_symlink()]
        paths += [p / STATE_FILE for p in own]
    for path in paths:
        if path.is_symlink() or path.is_file():
            path.unlink()  # a link itself goes, never what it points at
            removed.append(str(path))
    return removed


__all__ = [
    "MAX_RUN_BYTES",
    "ComposeProgram",
    "LocalNetwork",
    "RunNode",
    "RunRecord",
    "forget",
    "load_run",
    "remove_run",
    "run_problem",
    "save_run",
]

"""What deskside remembers of what it started.

- `NodeState`: on each node (`<node layout>/state.json`, written through the node's
  Transport): the engine deskside started there — how it is controlled, its session
  leader's pid and start time, its log, its release.
- `RunRecord`: on this machine (`$DESKSIDE_HOME/runs/<recipe>/run.json`): which nodes a run
  has, how to reach them, where their state lives, the API address, what the run created
  here (network namespaces, the shared memory present before it started).

`status`, `logs` and `down` read these from any shell; they touch nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from deskside.errors import DesksideError
from deskside.home import runs_dir
from deskside.layout import NodeLayout
from deskside.recipe.types import Ssh
from deskside.transport.base import Result, Transport
from deskside.transport.local import LocalTransport

ControlKind = Literal["process", "systemd", "compose"]
RUN_FILE = "run.json"

# a pid deskside may signal: never 0 or 1 (0 and -1 select whole groups, 1 is init)
Pid = Annotated[int, Field(ge=2)]
# a namespace or link name deskside made (never an option, never a path)
LinkName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$")]


class NodeState(BaseModel):
    """What deskside started on one node."""

    model_config = ConfigDict(extra="forbid")

    recipe: str
    node: str
    role: str
    node_rank: int
    release: str | None  # the deployed release; None for runs on this machine
    control: ControlKind
    pid: Pid | None = None  # process: the engine's session leader
    pid_start: int | None = None  # its start time (clock ticks since boot)
    run_tag: str | None = None  # DESKSIDE_RUN in the environment of its every process
    log: str | None = None  # process: the engine's log file
    started_epoch: int | None = None  # node clock at start (journal/compose --since)
    started_at: str
    proxy_pid: Pid | None = None
    proxy_pid_start: int | None = None
    proxy_run_tag: str | None = None
    proxy_log: str | None = None


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
    nodes: list[RunNode]
    network: LocalNetwork | None = None
    shm_before: list[str] | None = None  # local runs: /dev/shm names before the start

    def layout(self, node: RunNode) -> NodeLayout:
        return NodeLayout.at(node.recipe_dir, self.recipe_name)


# --------------------------------------------------------------------------- on the nodes


def read_state(t: Transport, layout: NodeLayout) -> NodeState | None:
    """The node's state file, or None (absent or unreadable)."""
    try:
        data = t.get(layout.state_file)
    except FileNotFoundError:
        return None
    try:
        return NodeState.model_validate_json(data)
    except ValueError:
        return None


def state_bytes(state: NodeState) -> bytes:
    return state.model_dump_json(indent=2).encode() + b"\n"


def write_state(t: Transport, layout: NodeLayout, state: NodeState) -> None:
    t.put(state_bytes(state), layout.state_file, 0o644)


def remove_state(t: Transport, layout: NodeLayout) -> Result:
    return t.run(["rm", "-f", "--", layout.state_file])


# --------------------------------------------------------------------------- on this machine


def run_file(recipe_name: str) -> Path:
    return runs_dir() / recipe_name / RUN_FILE


def save_run(run: RunRecord) -> None:
    LocalTransport().put(run.model_dump_json(indent=2).encode(), str(run_file(run.recipe_name)))


def remove_run(recipe_name: str) -> None:
    run_file(recipe_name).unlink(missing_ok=True)


def run_names() -> list[str]:
    if not runs_dir().exists():
        return []
    return sorted(p.parent.name for p in runs_dir().glob(f"*/{RUN_FILE}"))


def load_run(recipe_name: str) -> RunRecord | None:
    path = run_file(recipe_name)
    if not path.exists():
        return None
    try:
        return RunRecord.model_validate_json(path.read_text())
    except ValueError as exc:
        raise DesksideError(
            f"{path} is not a run record deskside can read: {exc}",
            hint="remove the file if that run is gone",
        ) from None


def find_run(name: str | None) -> RunRecord:
    """The run `name`, or the only run there is."""
    if name is not None:
        run = load_run(name)
        if run is None:
            raise DesksideError(f"no run of {name!r}", hint="deskside up RECIPE first")
        return run
    names = run_names()
    if not names:
        raise DesksideError("nothing is running", hint="start a cluster: deskside up RECIPE")
    if len(names) > 1:
        raise DesksideError(f"several runs: {', '.join(names)}", hint="name one: --recipe NAME")
    run = load_run(names[0])
    assert run is not None
    return run

"""What deskside started on one node: `state.json` in the node's state folder
(`NodeLayout.state_file`), written and read through the node's Transport.

It names the engine deskside started there (how it is controlled; for a process, its
session leader's pid, start time, run tag and log; its release) and the services started
beside it, each proven deskside's own the same way. `read_state` refuses a file that is not
a record deskside wrote for that node (`state_ok`): nothing is signalled on its word.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from deskside.layout import NodeLayout
from deskside.records.read import BadState, read_on_node
from deskside.records.write import record_bytes, write_on_node
from deskside.transport.base import Result, Transport

ControlKind = Literal["process", "systemd", "compose"]

# a pid deskside may signal: never 0 or 1 (0 and -1 select whole groups, 1 is init)
Pid = Annotated[int, Field(ge=2)]
ServiceName = Literal["proxy", "prometheus", "node_exporter", "exporter", "watch", "gate"]
"""Processes deskside starts beside an engine: the LiteLLM proxy (head), Prometheus (head),
node_exporter and deskside's exporter (every node), `deskside watch` (head, runs on this
machine), the proxy's drain gate (head, runs on this machine: `deskside.runtime.engine_gate`)."""
SERVICE_NAMES: tuple[ServiceName, ...] = (
    "proxy",
    "prometheus",
    "node_exporter",
    "exporter",
    "watch",
    "gate",
)
TAG_RE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*/[0-9]{14}/"
    r"(engine|proxy|prometheus|node_exporter|exporter|watch|gate)"
)
MAX_STATE_BYTES = 64 * 1024
FORGET_HINT = (
    "nothing was stopped on its word; if the engines are gone, remove deskside's records "
    "with `deskside down --forget {name}` (it signals nothing)"
)


class ServiceState(BaseModel):
    """A process deskside started beside the engine (see `ServiceName`), proven its own
    the same way as the engine: pid, start time and run tag."""

    model_config = ConfigDict(extra="forbid")

    name: ServiceName
    pid: Pid
    pid_start: int | None = None
    run_tag: str | None = None
    log: str


UnitName = Annotated[str, Field(pattern=r"^deskside-[A-Za-z0-9_.-]{1,200}\.service$")]
ProjectName = Annotated[str, Field(pattern=r"^deskside-[A-Za-z0-9_.-]{1,200}$")]


class ComposeProject(BaseModel):
    """A Compose project of services deskside brought up on a node (`docker compose
    --project-name project --file file up`)."""

    model_config = ConfigDict(extra="forbid")

    project: ProjectName
    file: str


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
    run_tag: str | None = None  # the run tag in the environment of its every process
    log: str | None = None  # process: the engine's log file
    started_epoch: int | None = None  # node clock at start (journal/compose --since)
    started_at: str
    services: list[ServiceState] = Field(default_factory=list, max_length=len(SERVICE_NAMES))
    units: list[UnitName] = Field(default_factory=list, max_length=8)  # systemd: services' units
    compose: list[ComposeProject] = Field(default_factory=list, max_length=4)  # their projects

    def service(self, name: ServiceName) -> ServiceState | None:
        return next((s for s in self.services if s.name == name), None)


def state_ok(state: NodeState, layout: NodeLayout) -> str | None:
    """Why a state file cannot be deskside's own record for this node, or None."""
    for path in (state.log, *(s.log for s in state.services)):
        if path is not None:
            parts = PurePosixPath(path).parts
            if not path.startswith(layout.logs + "/") or ".." in parts:
                return f"its log {path!r} is not under {layout.logs}"
    for tag in (state.run_tag, *(s.run_tag for s in state.services)):
        if tag is not None and not TAG_RE.fullmatch(tag):
            return f"its run tag {tag!r} is not one deskside makes"
    for s in state.services:
        if s.run_tag is not None and not s.run_tag.endswith("/" + s.name):
            return f"its {s.name} carries the run tag of another process ({s.run_tag!r})"
    names = [s.name for s in state.services]
    if len(set(names)) != len(names):
        return "it records one service twice"
    for unit in state.units:
        if not unit.startswith(f"deskside-{state.recipe}-"):
            return f"its unit {unit!r} is not one of the recipe's"
    for c in state.compose:
        parts = PurePosixPath(c.file).parts
        if not c.file.startswith(layout.recipe_dir + "/") or ".." in parts:
            return f"its Compose file {c.file!r} is not under {layout.recipe_dir}"
    return None


def read_state(t: Transport, layout: NodeLayout, recipe_name: str = "RECIPE") -> NodeState | None:
    """The node's state file; None when there is none. BadState when it is there but is not
    a record deskside wrote (not a regular file, too large, not a NodeState, paths outside
    the node's layout)."""
    hint = FORGET_HINT.format(name=recipe_name)
    state = read_on_node(t, layout.state_file, NodeState, MAX_STATE_BYTES, "a state file", hint)
    if state is not None and (why := state_ok(state, layout)) is not None:
        raise BadState(f"{t.name}:{layout.state_file}: {why}", hint=hint)
    return state


def state_bytes(state: NodeState) -> bytes:
    return record_bytes(state)


def write_state(t: Transport, layout: NodeLayout, state: NodeState) -> None:
    write_on_node(t, layout.state_file, state)


# The state file of the node's folder, never through a link put in place of the folder (the
# file itself, a link or not, is what is removed: never what it points at).
REMOVE_STATE_SH = r"""
d=${1%/}
if [ -L "$d" ]; then echo "$d is a link: its state file is not deskside's to remove" >&2; exit 3; fi
rm -f -- "$d/$2"
"""


def remove_state_argv(layout: NodeLayout) -> list[str]:
    folder, _, name = layout.state_file.rpartition("/")
    return ["sh", "-c", REMOVE_STATE_SH, "sh", folder, name]


def remove_state(t: Transport, layout: NodeLayout) -> Result:
    return t.run(remove_state_argv(layout))


__all__ = [
    "FORGET_HINT",
    "MAX_STATE_BYTES",
    "SERVICE_NAMES",
    "TAG_RE",
    "ComposeProject",
    "ControlKind",
    "NodeState",
    "Pid",
    "ServiceName",
    "ServiceState",
    "read_state",
    "remove_state",
    "remove_state_argv",
    "state_bytes",
    "state_ok",
    "write_state",
]

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

import contextlib
import re
import stat
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from deskside.errors import DesksideError, UsageError
from deskside.home import deskside_home, runs_dir
from deskside.layout import STATE_FILE, NodeLayout
from deskside.localnet import bridge_name
from deskside.locks import Held, hold
from deskside.recipe.types import Ssh
from deskside.transport.base import Result, Transport
from deskside.transport.local import LocalTransport

ControlKind = Literal["process", "systemd", "compose"]
ComposeProgram = Literal["docker compose", "docker-compose"]
RUN_FILE = "run.json"

# a pid deskside may signal: never 0 or 1 (0 and -1 select whole groups, 1 is init)
Pid = Annotated[int, Field(ge=2)]
# a namespace or link name deskside made (never an option, never a path)
LinkName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$")]
RUN_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
ServiceName = Literal["proxy", "prometheus", "node_exporter", "exporter", "watch"]
"""Processes deskside starts beside an engine: the LiteLLM proxy (head), Prometheus (head),
node_exporter and deskside's exporter (every node), `deskside watch` (head, runs on this
machine)."""
SERVICE_NAMES: tuple[ServiceName, ...] = (
    "proxy",
    "prometheus",
    "node_exporter",
    "exporter",
    "watch",
)
TAG_RE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*/[0-9]{14}/"
    r"(engine|proxy|prometheus|node_exporter|exporter|watch)"
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
    run_tag: str | None = None  # DESKSIDE_RUN in the environment of its every process
    log: str | None = None  # process: the engine's log file
    started_epoch: int | None = None  # node clock at start (journal/compose --since)
    started_at: str
    services: list[ServiceState] = Field(default_factory=list, max_length=len(SERVICE_NAMES))
    units: list[UnitName] = Field(default_factory=list, max_length=8)  # systemd: services' units
    compose: list[ComposeProject] = Field(default_factory=list, max_length=4)  # their projects

    def service(self, name: ServiceName) -> ServiceState | None:
        return next((s for s in self.services if s.name == name), None)


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
    nodes: list[RunNode]
    network: LocalNetwork | None = None
    shm_before: list[str] | None = None  # local runs: /dev/shm names before the start
    replica_set: str | None = None  # a group of this replica set (its proxy fronts it)
    engine_keyed: bool | None = None  # the head's engine requires its key; None: older record

    def layout(self, node: RunNode) -> NodeLayout:
        return NodeLayout.at(node.recipe_dir, self.recipe_name)

    @property
    def keyed(self) -> bool:
        """The head's engine answers /v1 only with its key (a proxy fronts it)."""
        return self.engine_keyed if self.engine_keyed is not None else self.proxy_url is not None


# --------------------------------------------------------------------------- on the nodes


class BadState(DesksideError):
    """A state file or run record deskside cannot trust: nothing is signalled on its word."""

    exit_code = 2


FORGET_HINT = (
    "nothing was stopped on its word; if the engines are gone, remove deskside's records "
    "with `deskside down --forget --recipe {name}` (it signals nothing)"
)

# The node's state file, read only when it is a regular file (never a link, a FIFO or a
# device) of at most MAX_STATE_BYTES. Exit 4: absent; 3: not a file deskside reads.
MAX_STATE_BYTES = 64 * 1024
STATE_READ_SH = r"""
f=$1; max=$2
if [ -L "$f" ]; then echo "is a link" >&2; exit 3; fi
[ -e "$f" ] || exit 4
if [ ! -f "$f" ]; then echo "is not a regular file" >&2; exit 3; fi
size=$(wc -c < "$f")
if [ "$size" -gt "$max" ]; then echo "holds $size bytes" >&2; exit 3; fi
cat -- "$f"
"""


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
    where = f"{t.name}:{layout.state_file}"
    hint = FORGET_HINT.format(name=recipe_name)
    r = t.run(
        ["sh", "-c", STATE_READ_SH, "sh", layout.state_file, str(MAX_STATE_BYTES)], timeout=30
    )
    if r.rc == 4:
        return None
    if not r.ok:
        raise BadState(f"{where} {r.stderr.strip() or 'cannot be read'}", hint=hint)
    try:
        state = NodeState.model_validate_json(r.stdout)
    except (ValueError, RecursionError):
        raise BadState(f"{where} is not a state file deskside wrote", hint=hint) from None
    if (why := state_ok(state, layout)) is not None:
        raise BadState(f"{where}: {why}", hint=hint)
    return state


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


SET_FILE = "replica-set.json"  # a replica set's record (deskside.replicas.records)
LOOKS_FILE = "looks.jsonl"  # the run's series of looks (deskside.runtime.looks)


def remove_run(recipe_name: str) -> None:
    """The run's record and its series of looks (diagnostic bundles stay)."""
    run_file(recipe_name).unlink(missing_ok=True)
    (runs_dir() / recipe_name / LOOKS_FILE).unlink(missing_ok=True)


def run_names() -> list[str]:
    if not runs_dir().exists():
        return []
    return sorted(p.parent.name for p in runs_dir().glob(f"*/{RUN_FILE}"))


MAX_RUN_BYTES = 1024 * 1024


def check_run_name(name: str) -> str:
    if not RUN_NAME_RE.fullmatch(name):
        raise UsageError(
            f"{name!r} is not a recipe name",
            hint="recipe names are letters, digits, '.', '_' and '-' (see deskside status)",
        )
    return name


def load_run(recipe_name: str) -> RunRecord | None:
    """The run record of `recipe_name`, None when there is none; BadState when the file is
    not a record deskside wrote for that run (see `run_problem`)."""
    path = run_file(check_run_name(recipe_name))
    hint = FORGET_HINT.format(name=recipe_name)
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise BadState(f"{path} is not a regular file", hint=hint)
    if info.st_size > MAX_RUN_BYTES:
        raise BadState(f"{path} holds {info.st_size:,} bytes, not a run record", hint=hint)
    try:
        run = RunRecord.model_validate_json(LocalTransport().get(str(path)))
    except (ValueError, RecursionError):
        raise BadState(f"{path} is not a run record deskside wrote", hint=hint) from None
    if (why := run_problem(run, recipe_name)) is not None:
        raise BadState(f"{path}: {why}", hint=hint)
    return run


def run_problem(run: RunRecord, recipe_name: str) -> str | None:
    """Why `run` cannot be deskside's own record of `recipe_name`: every name and folder in
    it is re-derived from deskside's own naming and compared."""
    if run.recipe_name != recipe_name:
        return f"it names recipe {run.recipe_name!r}"
    for node in run.nodes:
        if run.runtime == "local":
            want = str(runs_dir() / recipe_name / "nodes" / node.name)
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


def only_run_name() -> str:
    """The one run folder there is (its records may be unreadable)."""
    names = (
        sorted(p.name for p in runs_dir().iterdir() if p.is_dir()) if runs_dir().is_dir() else []
    )
    if len(names) != 1:
        raise UsageError(
            "name the run to forget: --recipe NAME",
            hint="runs: " + (", ".join(names) or "none"),
        )
    return names[0]


def forget(recipe_name: str) -> list[str]:
    """Remove deskside's own records of a run on this machine (its run record, and the
    state files of its nodes on this machine), signalling nothing; returns what went."""
    base = runs_dir() / check_run_name(recipe_name)
    removed = []
    paths = [base / RUN_FILE, *sorted((base / "nodes").glob(f"*/{STATE_FILE}"))]
    for path in paths:
        if path.is_symlink() or path.is_file():
            path.unlink()
            removed.append(str(path))
    return removed


def run_lock(name: str) -> contextlib.AbstractContextManager[Held]:
    """One deskside at a time on a run (`up`, `down`, `down --forget`, the demo): a second
    one gets `Busy` naming the holder's pid. The lock lives beside the runs, not in the
    run's folder, which `down` empties."""
    path = deskside_home() / "locks" / f"run-{check_run_name(name)}.lock"
    return hold(path, f"run {name}")


def find_run(name: str | None) -> RunRecord:
    """The run `name`, or the only run there is (BadState for a record deskside cannot
    trust)."""
    name = pick_run(name)
    run = load_run(name)
    if run is None and (runs_dir() / name / SET_FILE).is_file():
        raise DesksideError(
            f"{name} is a replica set: each of its groups is a run of its own",
            hint=f"`deskside status --recipe {name}` shows them all; other commands take a "
            f"group's run, {name}-<group>",
        )
    if run is None:
        raise DesksideError(f"no run of {name!r}", hint="deskside up RECIPE first")
    return run


def pick_run(name: str | None) -> str:
    """`name`, or the name of the only run there is."""
    if name is not None:
        return check_run_name(name)
    names = run_names()
    if not names:
        raise DesksideError("nothing is running", hint="start a cluster: deskside up RECIPE")
    if len(names) > 1:
        raise DesksideError(f"several runs: {', '.join(names)}", hint="name one: --recipe NAME")
    return names[0]

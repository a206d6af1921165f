"""How a node's engine is started, stopped, watched and read, per kind of control:

- `process`: the engine runs detached in its own session (`Transport.spawn`), its pid,
  start time and log file recorded in the node's state file; stopped by session (SIGTERM,
  then SIGKILL), and only when the recorded pid is still the process deskside started.
- `systemd` (runtime.systemd): the release's unit is installed in /etc/systemd/system,
  enabled and restarted; the native unit runs `current/launch.sh`, the container unit
  `docker compose up` on `current/compose.yaml`. Logs from the journal (native) or Compose
  (container) since the start.
- `compose` (container runtime without systemd): `docker compose up --detach` on
  `current/compose.yaml`.

Starting and stopping are operations (`deskside.runtime.ops`); watching and reading run
their commands through the node's Transport right away.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from deskside.compose_cli import compose_argv, logs_argv, running_argv
from deskside.errors import DesksideError
from deskside.facts.base import FactError
from deskside.facts.procs import PROCESS_IDS, RUN_TAG, ProcessTable
from deskside.identity import Claim, Unproven, Verdict, judge, stop_command
from deskside.layout import NodeLayout
from deskside.records.node import ControlKind, NodeState, ServiceState
from deskside.records.run import ComposeProgram
from deskside.runtime import node_sh
from deskside.runtime.ops import Op, Record, Run, Spawn
from deskside.runtime.ready import Watched
from deskside.transport.base import Result, Transport

UNIT_DIR = "/etc/systemd/system"


def run_tag(state: NodeState, what: str) -> str:
    """The run tag of one start: recipe, node, start time and what started."""
    when = "".join(ch for ch in state.started_at if ch.isdigit())[:14]
    return f"{state.recipe}/{state.node}/{when}/{what}"


def control_kind(systemd: bool, runtime_kind: str) -> ControlKind:
    if systemd:
        return "systemd"
    return "compose" if runtime_kind == "container" else "process"


def _fail(t: Transport, what: str, r: Result) -> DesksideError:
    detail = (r.stderr or r.stdout).strip()[-400:]
    return DesksideError(f"{t.name}: {what} failed (exit {r.rc}): {detail}")


def engine_claim(state: NodeState) -> Claim:
    """What the node's state says of the engine deskside started there."""
    return Claim(f"the engine of {state.node}", state.pid, state.pid_start, state.run_tag)


def service_claim(state: NodeState | None, service: ServiceState) -> Claim:
    where = f" of {state.node}" if state is not None else ""
    return Claim(f"the {service.name}{where}", service.pid, service.pid_start, service.run_tag)


def stop_or_refuse(claim: Claim, grace: float) -> list[str]:
    """The stop of `claim`, or for a claim that proves nothing a command that only says so
    and fails (nothing is signalled)."""
    try:
        return stop_command(claim, grace)
    except Unproven as exc:
        return node_sh.refuse(exc.message)


class TableUnread(DesksideError):
    """The node answered, but its process table could not be read."""


def read_table(t: Transport) -> ProcessTable:
    """The node's process table (pids, sessions, start times, run tags). TableUnread when
    it cannot be read (the transport's own error when the node cannot be reached)."""
    r = t.run(PROCESS_IDS.argv(), timeout=60)
    table = PROCESS_IDS.read(r)
    if not isinstance(table, ProcessTable):
        raise TableUnread(f"{t.name}: reading the process table failed: {table.reason}")
    return table


@dataclass(frozen=True)
class Control:
    """Start, stop, watch and read one recipe's engine on a node (see the module doc)."""

    kind: ControlKind
    runtime: str  # native | container
    layout: NodeLayout
    sudo: tuple[str, ...] = ()  # ("sudo", "-n") for a non-root login
    compose_program: ComposeProgram = "docker compose"  # runtime.compose

    def with_sudo(self, sudo: tuple[str, ...]) -> Control:
        return replace(self, sudo=sudo)

    # -- commands (pure)

    def compose_file(self, project: str, file: str, *verb: str) -> list[str]:
        return [*self.sudo, *compose_argv(self.compose_program, project, file, *verb)]

    def compose(self, *verb: str) -> list[str]:
        """A Compose command on the engine's project (the release `current` points at)."""
        return self.compose_file(
            self.layout.compose_project, f"{self.layout.current}/compose.yaml", *verb
        )

    def unit_install(self, rid: str, units: tuple[str, ...] = ()) -> list[list[str]]:
        """Install and enable units of release `rid` (default: the engine's)."""
        units = units or (self.layout.unit_name,)
        return [
            *(
                [
                    *self.sudo,
                    "install",
                    "-m",
                    "0644",
                    "--",
                    f"{self.layout.release(rid)}/{unit}",
                    f"{UNIT_DIR}/{unit}",
                ]
                for unit in units
            ),
            [*self.sudo, "systemctl", "daemon-reload"],
            [*self.sudo, "systemctl", "enable", "--quiet", *units],
        ]

    def start_commands(self, rid: str) -> list[list[str]]:
        """The commands that start release `rid` (the process control spawns instead)."""
        if self.kind == "systemd":
            return [
                *self.unit_install(rid),
                [*self.sudo, "systemctl", "restart", self.layout.unit_name],
            ]
        if self.kind == "compose":
            return [self.compose("up", "--detach", "--remove-orphans")]
        return []

    def stop_commands(self, state: NodeState, grace: float) -> list[list[str]]:
        """Stop the engine and the services (proxy, monitoring) `state` describes: the
        proxy first (no new requests), the monitoring last (it sees the engine stop)."""
        argv: list[list[str]] = []
        for service in state.services:
            if service.name == "proxy":
                argv.append(stop_or_refuse(service_claim(state, service), grace))
        if state.units:
            argv.append([*self.sudo, "systemctl", "disable", "--now", "--quiet", *state.units])
        for c in state.compose:
            argv.append(self.compose_file(c.project, c.file, "down"))
        if self.kind == "systemd":
            # disabled too: a stopped cluster stays stopped after a reboot (a start
            # enables the units again)
            unit = self.layout.unit_name
            argv.append([*self.sudo, "systemctl", "disable", "--now", "--quiet", unit])
        elif self.kind == "compose":
            argv.append(self.compose("down"))
        elif state.pid is not None:
            argv.append(stop_or_refuse(engine_claim(state), grace))
        argv += [
            stop_or_refuse(service_claim(state, s), grace)
            for s in state.services
            if s.name != "proxy"
        ]
        return argv

    def service_alive(self, t: Transport, service: ServiceState) -> bool:
        """Whether `service` still runs (the process deskside started, by pid, start time
        and run tag; or alive but unproven when its record lacks one of them)."""
        try:
            return judge(read_table(t), service_claim(None, service)).alive
        except TableUnread:
            return False

    def alive_command(self) -> list[str]:
        if self.runtime == "container":
            return [*self.sudo, *running_argv(self.layout.compose_project)]
        return [*self.sudo, "systemctl", "is-active", "--quiet", self.layout.unit_name]

    def log_command(self, state: NodeState, lines: int | None = None) -> list[str]:
        """The whole log since the start (or its last `lines`): journal or Compose."""
        since = str(state.started_epoch) if state.started_epoch is not None else None
        if self.runtime == "container":
            project, file = self.layout.compose_project, f"{self.layout.current}/compose.yaml"
            argv = logs_argv(self.compose_program, project, file, since=since, lines=lines)
            return [*self.sudo, *argv]
        unit = self.layout.unit_name
        argv = [*self.sudo, "journalctl", "--unit", unit, "--output", "cat", "--no-pager"]
        if lines is not None:
            return [*argv, "--lines", str(lines)]
        return [*argv, *(["--since", f"@{since}"] if since else [])]

    # -- operations

    def start_ops(
        self,
        node: str,
        state: NodeState,
        *,
        argv: tuple[str, ...] = (),
        env: tuple[tuple[str, str], ...] = (),
        cwd: str | None = None,
        log: str = "",
        what: str = "",
    ) -> list[Op]:
        """Start the engine `state` describes. The process control spawns `argv` (with
        `env`, in `cwd`, output to `log`); systemd and Compose start the release that
        `current` points at."""
        if self.kind == "process":
            tagged = (*env, (RUN_TAG, run_tag(state, "engine")))
            return [Spawn(node, argv, tagged, log, cwd, what, self.layout, "engine", state)]
        ops: list[Op] = [Record(node, self.layout, state, what)]
        rid = state.release or ""
        ops += [
            Run(node, tuple(a), " ".join(a[len(self.sudo) :][:3]), 600)
            for a in self.start_commands(rid)
        ]
        return ops

    def stop_ops(self, node: str, state: NodeState, grace: float) -> list[Op]:
        return [
            Run(node, tuple(a), f"stopping the engine of {node}", grace + 300)
            for a in self.stop_commands(state, grace)
        ]

    # -- watching (runs now)

    def stop(self, t: Transport, state: NodeState, grace: float) -> bool:
        """Stop now; True when nothing of the engine is left."""
        return not self.stop_report(t, state, grace)

    def stop_report(self, t: Transport, state: NodeState, grace: float) -> list[str]:
        """Stop now; why each thing that is not stopped is not (empty: all stopped). What
        the state does not prove deskside's is left alone and said so."""
        problems = []
        for argv in self.stop_commands(state, grace):
            r = t.run(argv, timeout=grace + 300)
            if not r.ok:
                problems.append((r.stderr or r.stdout).strip()[-300:] or f"exit {r.rc}")
        return problems

    def poll(self, t: Transport, state: NodeState, offset: int) -> tuple[bool, int, bytes]:
        """(alive, new offset, log bytes since `offset`). The new offset is the log's
        size: poll with a large offset to learn where the log ends without reading it."""
        if self.kind == "process":
            assert state.pid is not None and state.log is not None
            r = t.run(node_sh.poll_process(state.log, offset, self.layout.recipe_dir), timeout=60)
            if not r.ok:
                raise _fail(t, "reading the engine log", r)
            try:
                poll = node_sh.parse_poll(r.stdout)
            except FactError as exc:
                raise TableUnread(f"{t.name}: reading the process table failed: {exc}") from None
            alive = judge(poll.table, engine_claim(state)).alive
            return alive, poll.size, poll.chunk
        alive_r = t.run(self.alive_command(), timeout=60)
        alive = alive_r.ok and (self.runtime != "container" or bool(alive_r.stdout.strip()))
        log = t.run(self.log_command(state), timeout=60)
        data = log.stdout.encode()
        return alive, len(data), data[offset:]

    def verdict(self, t: Transport, state: NodeState) -> Verdict:
        """What the node's process table says of the engine `state` records (process
        control)."""
        return judge(read_table(t), engine_claim(state))

    def alive(self, t: Transport, state: NodeState) -> bool:
        if self.kind == "process":
            if state.pid is None:
                return False
            try:
                return self.verdict(t, state).alive
            except TableUnread:
                return False
        r = t.run(self.alive_command(), timeout=60)
        return r.ok and (self.runtime != "container" or bool(r.stdout.strip()))

    def judged(self, t: Transport, state: NodeState) -> Verdict | None:
        """The process table's verdict on the process `state` names (process control
        with a pid and a readable table), else None."""
        if self.kind != "process" or state.pid is None:
            return None
        try:
            return self.verdict(t, state)
        except TableUnread:
            return None

    def stats(self, t: Transport, state: NodeState) -> tuple[int, int]:
        """(processes, RSS bytes) of the engine (process control; 0, 0 otherwise)."""
        if self.kind != "process" or state.pid is None:
            return 0, 0
        try:
            table = read_table(t)
        except TableUnread:
            return 0, 0
        verdict = judge(table, engine_claim(state))
        if not verdict.alive:
            return 0, 0
        procs = [p for q in verdict.members if (p := table.get(q)) is not None]
        return len(procs), sum(p.rss_bytes for p in procs)

    def tail(self, t: Transport, state: NodeState, lines: int) -> str:
        if self.kind == "process":
            assert state.log is not None
            r = t.run(node_sh.tail_file(state.log, lines, self.layout.recipe_dir), timeout=60)
        else:
            r = t.run(self.log_command(state, lines), timeout=60)
        return r.stdout


def watched(node: str, state: NodeState, control: Control, t: Transport, where: str) -> Watched:
    """A started node for the readiness loop: liveness and new log bytes, one round trip
    per poll through its Transport."""
    offset = 0

    def poll() -> tuple[bool, bytes]:
        nonlocal offset
        alive, offset, chunk = control.poll(t, state, offset)
        return alive, chunk

    return Watched(node, state.role, where, poll)

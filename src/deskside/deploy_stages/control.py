"""How a node's engine is started, stopped, watched and read, per runtime:

- `process` (native runtime, runtime.systemd false): the release's `launch.sh` runs
  detached in its own session (`Transport.spawn`), its pid and log file recorded in the
  node's state file; stopped by session (SIGTERM, then SIGKILL).
- `systemd` (runtime.systemd true): the release's unit is installed in
  /etc/systemd/system, enabled and restarted; the native unit runs `current/launch.sh`,
  the container unit `docker compose up` on `current/compose.yaml`. Logs from the journal
  (native) or Compose (container) since the start.
- `compose` (container runtime without systemd): `docker compose up --detach` on
  `current/compose.yaml`.

The state file (`RemoteNodeState`, JSON at R/N/state.json) is what `down`, `status` and
`logs` read later, from any machine with the recipe's SSH access.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from deskside.deploy_stages import commands as cmd
from deskside.deploy_stages.commands import NodePaths
from deskside.errors import DesksideError
from deskside.recipe.types import Recipe
from deskside.render.context import Layout
from deskside.transport.base import Result, Transport

ControlKind = Literal["process", "systemd", "compose"]
UNIT_DIR = "/etc/systemd/system"


class RemoteNodeState(BaseModel):
    """What deskside started on a node (R/N/state.json)."""

    model_config = ConfigDict(extra="forbid")

    recipe: str
    node: str
    role: str
    node_rank: int
    release: str
    control: ControlKind
    pid: int | None = None  # process: the engine's session leader
    log: str | None = None  # process: the engine's log file
    started_epoch: int | None = None  # node clock at start (journal/compose --since)
    started_at: str
    proxy_pid: int | None = None
    proxy_log: str | None = None


def control_kind(recipe: Recipe) -> ControlKind:
    if recipe.runtime.systemd:
        return "systemd"
    return "compose" if recipe.runtime.kind == "container" else "process"


def _fail(t: Transport, what: str, r: Result) -> DesksideError:
    detail = (r.stderr or r.stdout).strip()[-400:]
    return DesksideError(f"{t.name}: {what} failed (exit {r.rc}): {detail}")


@dataclass(frozen=True)
class Control:
    """Start, stop, watch and read one recipe's engine on a node (see the module doc)."""

    kind: ControlKind
    runtime: str  # native | container
    paths: NodePaths
    unit: str
    compose_project: str
    sudo: tuple[str, ...] = ()  # ("sudo", "-n") for a non-root login

    @classmethod
    def of(cls, recipe: Recipe, sudo: tuple[str, ...] = ()) -> Control:
        layout = Layout.of(recipe)
        return cls(
            kind=control_kind(recipe),
            runtime=recipe.runtime.kind,
            paths=NodePaths.of(layout),
            unit=layout.unit_name,
            compose_project=layout.compose_project,
            sudo=sudo,
        )

    def with_sudo(self, sudo: tuple[str, ...]) -> Control:
        return Control(self.kind, self.runtime, self.paths, self.unit, self.compose_project, sudo)

    # -- commands (pure)

    def compose(self, *verb: str) -> list[str]:
        return [
            *self.sudo,
            "docker",
            "compose",
            "--project-name",
            self.compose_project,
            "--file",
            f"{self.paths.current}/compose.yaml",
            *verb,
        ]

    def unit_install(self, rid: str) -> list[list[str]]:
        return [
            [
                *self.sudo,
                "install",
                "-m",
                "0644",
                "--",
                f"{self.paths.release(rid)}/{self.unit}",
                f"{UNIT_DIR}/{self.unit}",
            ],
            [*self.sudo, "systemctl", "daemon-reload"],
            [*self.sudo, "systemctl", "enable", "--quiet", self.unit],
        ]

    def start_commands(self, rid: str) -> list[list[str]]:
        """The commands `start` runs (the process runtime spawns instead)."""
        if self.kind == "systemd":
            return [*self.unit_install(rid), [*self.sudo, "systemctl", "restart", self.unit]]
        if self.kind == "compose":
            return [self.compose("up", "--detach", "--remove-orphans")]
        return []

    def stop_command(self, state: RemoteNodeState, grace: float) -> list[str] | None:
        if self.kind == "systemd":
            return [*self.sudo, "systemctl", "stop", self.unit]
        if self.kind == "compose":
            return self.compose("down")
        return None if state.pid is None else cmd.stop_session(state.pid, grace)

    def alive_command(self) -> list[str]:
        if self.runtime == "container":
            return self.compose("ps", "--status", "running", "--quiet")
        return [*self.sudo, "systemctl", "is-active", "--quiet", self.unit]

    def log_command(self, state: RemoteNodeState, lines: int | None = None) -> list[str]:
        """The whole log since the start (or its last `lines`): journal or Compose."""
        since = str(state.started_epoch) if state.started_epoch is not None else None
        if self.runtime == "container":
            argv = self.compose("logs", "--no-color", "--no-log-prefix")
            if lines is not None:
                return [*argv, "--tail", str(lines)]
            return [*argv, *(["--since", since] if since else [])]
        argv = [*self.sudo, "journalctl", "--unit", self.unit, "--output", "cat", "--no-pager"]
        if lines is not None:
            return [*argv, "--lines", str(lines)]
        return [*argv, *(["--since", f"@{since}"] if since else [])]

    # -- actions

    def start(
        self,
        t: Transport,
        *,
        recipe: str,
        node: str,
        role: str,
        node_rank: int,
        rid: str,
        started: datetime,
    ) -> RemoteNodeState:
        """Start release `rid` (for systemd and Compose, `current` must point at it)."""
        state = RemoteNodeState(
            recipe=recipe,
            node=node,
            role=role,
            node_rank=node_rank,
            release=rid,
            control=self.kind,
            started_at=started.isoformat(timespec="seconds"),
        )
        if self.kind == "process":
            release = self.paths.release(rid)
            log = self.paths.engine_log(rid, cmd.stamp(started))
            pid = t.spawn(["sh", f"{release}/launch.sh"], log_path=log, cwd=release)
            return state.model_copy(update={"pid": pid, "log": log})
        clock = t.run(["date", "+%s"])
        epoch = int(clock.stdout.strip()) if clock.ok and clock.stdout.strip().isdigit() else None
        for argv in self.start_commands(rid):
            r = t.run(argv, timeout=600)
            if not r.ok:
                raise _fail(t, " ".join(argv[len(self.sudo) :][:3]), r)
        return state.model_copy(update={"started_epoch": epoch})

    def stop(self, t: Transport, state: RemoteNodeState, grace: float) -> bool:
        """Stop the engine (and the proxy) `state` describes; True when nothing is left."""
        ok = True
        if state.proxy_pid is not None:
            ok = t.run(cmd.stop_session(state.proxy_pid, grace), timeout=grace + 30).ok
        argv = self.stop_command(state, grace)
        if argv is not None:
            ok = t.run(argv, timeout=grace + 300).ok and ok
        return ok

    def poll(self, t: Transport, state: RemoteNodeState, offset: int) -> tuple[bool, int, bytes]:
        """(alive, new offset, log bytes since `offset`). The new offset is the log's
        size: poll with a large offset to learn where the log ends without reading it."""
        if self.kind == "process":
            assert state.pid is not None and state.log is not None
            r = t.run(cmd.poll_process(state.pid, state.log, offset), timeout=60)
            if not r.ok:
                raise _fail(t, "reading the engine log", r)
            alive, size, chunk = cmd.parse_poll(r.stdout)
            return alive, size, chunk
        alive_r = t.run(self.alive_command(), timeout=60)
        alive = alive_r.ok and (self.runtime != "container" or bool(alive_r.stdout.strip()))
        log = t.run(self.log_command(state), timeout=60)
        data = log.stdout.encode()
        return alive, len(data), data[offset:]

    def alive(self, t: Transport, state: RemoteNodeState) -> bool:
        if self.kind == "process":
            if state.pid is None:
                return False
            r = t.run(cmd.poll_process(state.pid, "/dev/null", 0), timeout=60)
            return r.ok and cmd.parse_poll(r.stdout)[0]
        r = t.run(self.alive_command(), timeout=60)
        return r.ok and (self.runtime != "container" or bool(r.stdout.strip()))

    def stats(self, t: Transport, state: RemoteNodeState) -> tuple[int, int]:
        """(processes, RSS bytes) of the engine (process runtime; 0, 0 otherwise)."""
        if self.kind != "process" or state.pid is None:
            return 0, 0
        r = t.run(cmd.session_stats(state.pid), timeout=60)
        return cmd.parse_session_stats(r.stdout) if r.ok else (0, 0)

    def tail(self, t: Transport, state: RemoteNodeState, lines: int) -> str:
        if self.kind == "process":
            assert state.log is not None
            r = t.run(cmd.tail_file(state.log, lines), timeout=60)
        else:
            r = t.run(self.log_command(state, lines), timeout=60)
        return r.stdout


def read_state(t: Transport, paths: NodePaths) -> RemoteNodeState | None:
    """The node's state file, or None (absent or unreadable)."""
    try:
        data = t.get(paths.state_file)
    except FileNotFoundError:
        return None
    try:
        return RemoteNodeState.model_validate_json(data)
    except ValueError:
        return None


def write_state(t: Transport, paths: NodePaths, state: RemoteNodeState) -> None:
    t.put(state.model_dump_json(indent=2).encode() + b"\n", paths.state_file, 0o644)


def remove_state(t: Transport, paths: NodePaths) -> Result:
    return t.run(["rm", "-f", "--", paths.state_file])

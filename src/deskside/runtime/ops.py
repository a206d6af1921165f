"""Operations: what a stage wants done on a node, as data (pyinfra style). Stages return
them; `execute` is the only thing that carries them out, through the nodes' Transports; a
dry run prints them instead (`transcript_lines`).

    Run     a command on the node
    Put     bytes into a file on the node (atomic; a secret's bytes are never shown)
    Upload  a local file copied to the node
    Spawn   a detached engine (or proxy) in its own session; its pid and start time are
            recorded in the node's state file
    Record  the node's state file for an engine that systemd or Compose runs
    Local   a step on this machine (deskside's own run record)
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from deskside.errors import DesksideError
from deskside.layout import NodeLayout
from deskside.runtime import node_sh
from deskside.runtime.records import NodeState, ServiceName, ServiceState, write_state
from deskside.transport.base import Transport


class OpFailed(DesksideError):
    """An operation could not be carried out on its node."""


@dataclass(frozen=True)
class Run:
    node: str
    argv: tuple[str, ...]
    what: str
    timeout: float = 120.0

    def describe(self) -> str:
        return "run " + shlex.join(self.argv)


@dataclass(frozen=True)
class Put:
    node: str
    path: str
    data: bytes = field(repr=False)
    mode: int
    what: str
    secret: bool = False

    def describe(self) -> str:
        shown = (
            "secret, never shown"
            if self.secret
            else (f"sha256 {hashlib.sha256(self.data).hexdigest()[:12]}")
        )
        return f"put {self.path} (mode {self.mode:04o}, {len(self.data):,} bytes, {shown})"


@dataclass(frozen=True)
class Upload:
    node: str
    source: Path
    path: str
    mode: int
    what: str

    def describe(self) -> str:
        return f"upload {self.source.name} -> {self.path} (mode {self.mode:04o})"


@dataclass(frozen=True)
class Spawn:
    node: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    log: str
    cwd: str | None
    what: str
    layout: NodeLayout  # where the node's state file is
    record: Literal["engine"] | ServiceName
    state: NodeState | None  # engine: the state to record (pid and log filled in)

    def describe(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)
        where = f"cd {shlex.quote(self.cwd)} && " if self.cwd else ""
        return (
            f"spawn {where}{env + ' ' if env else ''}{shlex.join(self.argv)} "
            f">> {self.log} 2>&1 (own session; pid and start time -> {self.layout.state_file})"
        )


@dataclass(frozen=True)
class Record:
    node: str
    layout: NodeLayout
    state: NodeState
    what: str

    def describe(self) -> str:
        return f"record {self.layout.state_file} (node clock at start)"


@dataclass(frozen=True)
class Amend:
    """Add to the node's recorded state (what else was started there) and write it."""

    node: str
    layout: NodeLayout
    update: tuple[tuple[str, object], ...]
    what: str

    def describe(self) -> str:
        fields = ", ".join(f"{k}={v}" for k, v in self.update)
        return f"record {fields} in {self.layout.state_file}"


@dataclass(frozen=True)
class Local:
    what: str
    action: Callable[[], None] = field(repr=False, compare=False)
    node: str = "local"

    def describe(self) -> str:
        return self.what


Op = Run | Put | Upload | Spawn | Record | Amend | Local


def transcript_lines(stage: str, ops: Sequence[Op]) -> list[dict[str, str]]:
    return [{"stage": stage, "node": op.node, "what": op.what, "op": op.describe()} for op in ops]


@dataclass
class Executed:
    """What `execute` did so far (kept when an operation fails, for the rollback)."""

    done: list[Op] = field(default_factory=list)
    states: dict[str, NodeState] = field(default_factory=dict)  # node -> recorded state


def _check(t: Transport, op: Run, timeout: float | None = None) -> str:
    r = t.run(op.argv, timeout=timeout or op.timeout)
    if not r.ok:
        detail = (r.stderr or r.stdout).strip()[-400:]
        raise OpFailed(f"{op.node}: {op.what} failed (exit {r.rc}): {detail}")
    return r.stdout


def _pid_start(t: Transport, pid: int) -> int | None:
    r = t.run(node_sh.proc_start(pid), timeout=30)
    return node_sh.parse_proc_start(r.stdout) if r.ok else None


def _node_clock(t: Transport) -> int | None:
    r = t.run(["date", "+%s"], timeout=30)
    out = r.stdout.strip()
    return int(out) if r.ok and out.isdigit() else None


def execute(
    ops: Sequence[Op],
    transports: Mapping[str, Transport],
    done: Executed,
    say: Callable[[str], None] = lambda _msg: None,
) -> Executed:
    """Carry out `ops` in order; the first failure raises (OpFailed, or the transport's own
    error for an unreachable node), with `done` telling what was done before it."""
    last = ("", "")
    for op in ops:
        if (op.node, op.what) != last:
            say(f"{op.node}: {op.what}")
            last = (op.node, op.what)
        if isinstance(op, Local):
            op.action()
            done.done.append(op)
            continue
        t = transports[op.node]
        if isinstance(op, Run):
            _check(t, op)
        elif isinstance(op, Put):
            t.put(op.data, op.path, op.mode)
        elif isinstance(op, Upload):
            t.put_file(op.source, op.path, op.mode)
        elif isinstance(op, Spawn):
            pid = t.spawn(op.argv, env=dict(op.env), log_path=op.log, cwd=op.cwd)
            start = _pid_start(t, pid)
            tag = dict(op.env).get(node_sh.RUN_TAG)
            if op.record == "engine":
                assert op.state is not None
                state = op.state.model_copy(
                    update={"pid": pid, "pid_start": start, "run_tag": tag, "log": op.log}
                )
            else:
                base = done.states[op.node]
                service = ServiceState(
                    name=op.record, pid=pid, pid_start=start, run_tag=tag, log=op.log
                )
                others = [s for s in base.services if s.name != op.record]
                state = base.model_copy(update={"services": [*others, service]})
            write_state(t, op.layout, state)
            done.states[op.node] = state
        elif isinstance(op, Amend):
            state = done.states[op.node].model_copy(update=dict(op.update))
            write_state(t, op.layout, state)
            done.states[op.node] = state
        elif isinstance(op, Record):
            state = op.state.model_copy(update={"started_epoch": _node_clock(t)})
            write_state(t, op.layout, state)
            done.states[op.node] = state
        done.done.append(op)
    return done


def stamp(when: datetime) -> str:
    """`20260101T120000Z`: a start's name in log file names."""
    return f"{when:%Y%m%dT%H%M%SZ}"

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

import concurrent.futures
import hashlib
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal, TypeVar

from deskside.errors import DesksideError
from deskside.layout import NodeLayout
from deskside.records.node import NodeState, ServiceName, ServiceState, write_state
from deskside.runtime import node_sh
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
    seconds: dict[str, float] = field(default_factory=dict)  # node -> time spent on its ops


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


def _carry_out(op: Op, transports: Mapping[str, Transport], states: dict[str, NodeState]) -> None:
    """One operation; `states[op.node]` is the node's recorded state (read and written by
    this node's operations only)."""
    if isinstance(op, Local):
        op.action()
        return
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
            base = states[op.node]
            service = ServiceState(
                name=op.record, pid=pid, pid_start=start, run_tag=tag, log=op.log
            )
            others = [s for s in base.services if s.name != op.record]
            state = base.model_copy(update={"services": [*others, service]})
        write_state(t, op.layout, state)
        states[op.node] = state
    elif isinstance(op, Amend):
        state = states[op.node].model_copy(update=dict(op.update))
        write_state(t, op.layout, state)
        states[op.node] = state
    elif isinstance(op, Record):
        state = op.state.model_copy(update={"started_epoch": _node_clock(t)})
        write_state(t, op.layout, state)
        states[op.node] = state


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
        started = time.monotonic()
        try:
            _carry_out(op, transports, done.states)
        finally:
            done.seconds[op.node] = done.seconds.get(op.node, 0.0) + time.monotonic() - started
        done.done.append(op)
    return done


SLOW_AFTER = 15.0  # seconds: a node still on one operation after this is named


class NodesFailed(OpFailed):
    """Operations carried out on several nodes at once failed on some: `failures` names
    each such node's operation and error."""

    def __init__(self, failures: dict[str, tuple[Op, DesksideError]]) -> None:
        self.failures = failures
        lines = [_failure_line(node, op, exc) for node, (op, exc) in failures.items()]
        hints = [f"{node}: {exc.hint}" for node, (_, exc) in failures.items() if exc.hint]
        if len(lines) == 1:
            message = lines[0]
        else:
            message = f"{len(lines)} nodes failed:\n  " + "\n  ".join(lines)
        super().__init__(message, hint="\n  ".join(hints) or None)
        self.exit_code = max(exc.exit_code for _, exc in failures.values())


def _failure_line(node: str, op: Op, exc: DesksideError) -> str:
    if isinstance(exc, OpFailed):  # it names the node and the operation already
        return exc.message
    return f"{node}: {op.what}: {exc.message}"


@dataclass
class _NodeRun:
    """One node's share of a wave, carried out in its own thread."""

    node: str
    ops: list[Op]
    done: list[Op] = field(default_factory=list)
    failed: tuple[Op, BaseException] | None = None
    current: tuple[str, float] | None = None  # (what, since) while an operation runs
    seconds: float = 0.0

    def carry_out(
        self,
        transports: Mapping[str, Transport],
        states: dict[str, NodeState],
        stop: threading.Event,
        say: Callable[[str], None],
    ) -> None:
        last = ""
        for op in self.ops:
            if stop.is_set():  # another node failed, or the user interrupted
                return
            if op.what != last:
                say(f"{op.node}: {op.what}")
                last = op.what
            started = time.monotonic()
            self.current = (op.what, started)
            try:
                _carry_out(op, transports, states)
            except BaseException as exc:
                self.failed = (op, exc)
                return
            finally:
                self.current = None
                self.seconds += time.monotonic() - started
            self.done.append(op)


def _by_node(wave: Sequence[Op]) -> dict[str, _NodeRun]:
    runs: dict[str, _NodeRun] = {}
    for op in wave:
        runs.setdefault(op.node, _NodeRun(op.node, [])).ops.append(op)
    return runs


def _wait(
    futures: Mapping[str, concurrent.futures.Future[None]],
    runs: Mapping[str, _NodeRun],
    stop: threading.Event,
    say: Callable[[str], None],
    slow_after: float,
) -> None:
    """Until every node's thread is done; a failure stops the others after their current
    operation; a node busy for long is named."""
    pending = set(futures.values())
    while pending:
        finished, pending = concurrent.futures.wait(
            pending, timeout=slow_after, return_when=concurrent.futures.FIRST_COMPLETED
        )
        if any(r.failed for r in runs.values()):
            stop.set()
        if not finished:
            now = time.monotonic()
            for node, run in runs.items():
                current = run.current
                if current is not None and now - current[1] >= slow_after:
                    say(f"waiting for {node}: {current[0]} ({now - current[1]:.0f} s)")


def execute_waves(
    waves: Sequence[Sequence[Op]],
    transports: Mapping[str, Transport],
    done: Executed,
    say: Callable[[str], None] = lambda _msg: None,
    slow_after: float = SLOW_AFTER,
) -> Executed:
    """Carry out `waves` one after the other (a wave starts when the one before it is done
    on every node). Within a wave, each node's operations run in their planned order, the
    nodes at once, a thread each (a Transport may be used from several threads; each node
    has its own). A failure lets the other nodes finish the operation they are on, stops
    them, and raises NodesFailed naming each failed node's operation and error (a failure
    that is not a DesksideError is raised as it is). Either way `done` holds what every
    node did, node by node in planned order (what the rollback undoes)."""
    lock = threading.Lock()

    def told(msg: str) -> None:
        with lock:
            say(msg)

    for wave in waves:
        runs = _by_node(wave)
        stop = threading.Event()
        try:
            if len(runs) == 1:
                (run,) = runs.values()
                run.carry_out(transports, done.states, stop, told)
            elif runs:
                with concurrent.futures.ThreadPoolExecutor(
                    max_workers=len(runs), thread_name_prefix="deskside-node"
                ) as pool:
                    futures = {
                        n: pool.submit(r.carry_out, transports, done.states, stop, told)
                        for n, r in runs.items()
                    }
                    try:
                        _wait(futures, runs, stop, told, slow_after)
                    except BaseException:  # Ctrl-C: each node ends its current operation
                        stop.set()
                        raise
        finally:
            for run in runs.values():
                done.done += run.done
                done.seconds[run.node] = done.seconds.get(run.node, 0.0) + run.seconds
        failed = {n: r.failed for n, r in runs.items() if r.failed is not None}
        for _, exc in failed.values():
            if not isinstance(exc, DesksideError):
                raise exc
        if failed:
            raise NodesFailed(
                {n: (op, exc) for n, (op, exc) in failed.items() if isinstance(exc, DesksideError)}
            )
    return done


T = TypeVar("T")


def at_once(nodes: Iterable[str], call: Callable[[str], T]) -> dict[str, T]:
    """`call(node)` for each of `nodes`, each in a thread of its own (reads: facts, states,
    files; every node has its own Transport), the results by node in the order given; an
    exception is raised once every call has ended (the first, in the order given)."""
    names = list(dict.fromkeys(nodes))
    if len(names) <= 1:
        return {node: call(node) for node in names}
    with concurrent.futures.ThreadPoolExecutor(
        max_workers=len(names), thread_name_prefix="deskside-node"
    ) as pool:
        futures = {node: pool.submit(call, node) for node in names}
        concurrent.futures.wait(futures.values())
    return {node: f.result() for node, f in futures.items()}


def stamp(when: datetime) -> str:
    """`20260101T120000Z`: a start's name in log file names."""
    return f"{when:%Y%m%dT%H%M%SZ}"

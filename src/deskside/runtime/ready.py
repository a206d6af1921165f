"""Readiness of a starting cluster, wherever its nodes run: the engine logs are followed
for failure events (vLLM's refusals, OOM, distributed time-outs, dead workers), every node
must stay alive, and the cluster is ready when the head answers /health, /v1/models lists
every served name, and the head has logged its KV cache line.

How a node's log and liveness are read is the caller's business (`Watched.poll`): local
files and /proc for the native runtime, one remote command per poll over SSH for deploys.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

from deskside.engine.http import health, served_models
from deskside.engine.logs import EngineEvent, parse_line
from deskside.errors import DesksideError
from deskside.httpclient import METRICS
from deskside.httpclient import client as bounded_client
from deskside.runtime.phases import event_times, seen_at

FAILURE_EVENTS = ("refused", "oom", "distributed_timeout", "worker_died", "connection_refused")
TAIL_LINES = 15

Progress = Callable[[str], None]


@dataclass
class LogFollower:
    """Turns a node's log, fed chunk by chunk (or read from a local file with `poll`),
    into events; keeps the last lines for error messages."""

    node: str
    path: str
    offset: int = 0  # bytes of `path` read so far (local files)
    events: list[EngineEvent] = field(default_factory=list)
    last_line: str = ""
    pending: bytes = b""
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    seen: dict[str, float] = field(default_factory=dict)  # event kind -> when (`seen_at`)

    def feed(self, chunk: bytes, now: float | None = None) -> list[EngineEvent]:
        """Events of the complete lines in `pending + chunk`; a partial last line waits.
        `now`: when the chunk was read; each event's time goes into `seen`
        (`deskside.runtime.phases.event_times`)."""
        data = self.pending + chunk
        end = data.rfind(b"\n")
        if end < 0:
            self.pending = data
            return []
        self.pending = data[end + 1 :]
        new = []
        lines = data[: end + 1].decode(errors="replace").splitlines()
        for raw in lines:
            if raw.strip():
                self.last_line = raw.strip()
                self.recent.append(raw)
            if (event := parse_line(raw)) is not None:
                new.append(event)
        self.events.extend(new)
        if now is not None:
            seen_at(zip(new, event_times(new, now, lines), strict=True), self.seen)
        return new

    def read_local(self) -> bytes:
        """New bytes of the local file `path` since the last read."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return b""
        self.offset += len(chunk)
        return chunk

    def poll(self) -> list[EngineEvent]:
        """Events of the lines appended to the local file `path` since the last poll."""
        return self.feed(self.read_local())

    def tail(self) -> str:
        return "\n".join(self.recent) if self.recent else "(no log)"


@dataclass
class Watched:
    """One node being watched while it starts."""

    name: str
    role: str  # head | worker
    where: str  # where its log is, for messages
    poll: Callable[[], tuple[bool, bytes]]  # (alive, log bytes since the last poll)
    follower: LogFollower = field(init=False)

    def __post_init__(self) -> None:
        self.follower = LogFollower(self.name, self.where)


@dataclass
class Readiness:
    logged_kv_cache_line: str | None = None
    logged_kv_cache_tokens: int | None = None
    events: dict[str, list[EngineEvent]] = field(default_factory=dict)
    seen: dict[str, dict[str, float]] = field(default_factory=dict)  # node -> event -> when
    health_at: float | None = None  # /health first answered 200


def wait_ready(
    *,
    api_url: str,
    served_names: Sequence[str],
    planned_kv_cache_tokens: int | None,
    nodes: Sequence[Watched],
    timeout: float,
    say: Progress,
    interval: float = 0.25,
    client: httpx.Client | None = None,
    clock: Callable[[], float] = time.time,
) -> Readiness:
    """Block until the cluster serves (see the module docstring); a DesksideError names
    the node and the reason otherwise (its last log lines in the hint). `client` (closed
    on return) defaults to a new httpx client. What the start-up phases need is timed by
    `clock`: each node's log events and the first /health."""
    head = next(n for n in nodes if n.role == "head")
    out = Readiness()
    deadline = time.monotonic() + timeout
    phase = ""
    with client or bounded_client(METRICS) as http:
        while time.monotonic() < deadline:
            for node in nodes:
                # liveness first: when a node is found dead, its log read after it is complete
                alive, chunk = node.poll()
                for event in node.follower.feed(chunk, clock()):
                    if event.kind in FAILURE_EVENTS:
                        raise DesksideError(
                            f"node {node.name}: {event.explanation}",
                            hint=(event.hint or "")
                            + f"\n  last lines of {node.where}:\n{node.follower.tail()}",
                        )
                    if event.kind == "kv_cache" and node.role == "head":
                        out.logged_kv_cache_line = event.line.split("] ", 1)[-1].strip()
                        tokens = event.data["kv_cache_tokens"]
                        assert isinstance(tokens, int)
                        out.logged_kv_cache_tokens = tokens
                        if planned_kv_cache_tokens is not None and (
                            tokens != planned_kv_cache_tokens
                        ):
                            say(
                                f"warning: engine KV cache {tokens:,} tokens, plan "
                                f"{planned_kv_cache_tokens:,}"
                            )
                    if event.kind in ("loading", "kv_cache") and event.kind != phase:
                        phase = event.kind
                        say(event.explanation)
                if not alive:
                    raise DesksideError(
                        f"node {node.name} ({node.role}) exited during start-up",
                        hint=f"last lines of {node.where}:\n{node.follower.tail()}",
                    )
            if out.logged_kv_cache_line and health(http, api_url):
                out.health_at = out.health_at or clock()
                listed = served_models(http, api_url)
                if all(n in listed for n in served_names):
                    out.events = {n.name: n.follower.events for n in nodes}
                    out.seen = {n.name: dict(n.follower.seen) for n in nodes}
                    return out
            time.sleep(interval)
    stuck = min(nodes, key=lambda n: len(n.follower.events))
    raise DesksideError(
        f"not ready after {timeout:.0f} s; node {stuck.name} looks stuck "
        f"(head: {head.name}, API {api_url})",
        hint=f"last lines of {stuck.where}:\n{stuck.follower.tail()}",
    )

"""Start-up phases: how long a start took to reach each step, from the start command.

    process_started  the engine processes run (the spawns returned)
    weights_loaded   the last node's weights are in place (vLLM's "Model loading took" or
                     "Loading weights took"; with --load-format dummy its "Initializing model
                     took", after which the dummy loader logs nothing)
    kv_allocated     the head's "init engine (profile, create kv cache, warmup model) took"
    port_open        the head's "Starting vLLM server on" (uvicorn serves next)
    health           /health first answered 200 (deskside's probe)
    first_token      the first token of a one-token streamed completion sent once ready

Log events are timed where deskside saw them, corrected by the lines' own stamps
(`event_times`): a chunk read at once is spread back over the seconds its lines carry.
A phase beyond REGRESSION (20 %) and MIN_REGRESSION_SECONDS slower than the previous start
of the same lock is flagged.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime

import httpx

from deskside.engine.http import first_token
from deskside.engine.launch import NodeLaunch
from deskside.engine.logs import EngineEvent, log_stamp
from deskside.httpclient import PROBE, Limits
from deskside.httpclient import client as bounded_client
from deskside.records.starts import StartKind, StartPhases, append_start, last_start

PHASES = (
    "process_started",
    "weights_loaded",
    "kv_allocated",
    "port_open",
    "health",
    "first_token",
)
REGRESSION = 0.20
MIN_REGRESSION_SECONDS = 1.0  # below this a phase's change is the poll's, not the engine's


def stamp_seconds(stamp: str) -> float:
    """A vLLM log stamp ("MM-DD HH:MM:SS") as seconds in a leap year (02-29 exists)."""
    return datetime.strptime(f"2000-{stamp}", "%Y-%m-%d %H:%M:%S").timestamp()


def event_times(events: Sequence[EngineEvent], seen_at: float, lines: Sequence[str]) -> list[float]:
    """When each of `events` (of the `lines` read in one chunk at `seen_at`) happened: the
    chunk's last stamped line is taken as written at `seen_at`, every stamped event as
    many seconds earlier as the stamps say; an event without a stamp (or stamped later, as
    across a year's end) at `seen_at`."""
    newest = next((s for line in reversed(lines) if (s := log_stamp(line))), None)
    if newest is None:
        return [seen_at] * len(events)
    last = stamp_seconds(newest)
    out = []
    for event in events:
        stamp = log_stamp(event.line)
        out.append(seen_at - max(0.0, last - stamp_seconds(stamp)) if stamp else seen_at)
    return out


# a model with a drafter (MTP, EAGLE) loads twice: its weights are in place after the last
LAST_KINDS = frozenset({"weights_loaded", "model_initialized"})


def seen_at(timed: Iterable[tuple[EngineEvent, float]], into: dict[str, float]) -> None:
    """Event kind -> when it happened, into `into`: the first time, or for LAST_KINDS the
    last."""
    for event, at in timed:
        if event.kind in LAST_KINDS:
            into[event.kind] = at
        else:
            into.setdefault(event.kind, at)


def cluster_phases(
    *,
    t0: float,
    process_started: float | None,
    seen: Mapping[str, Mapping[str, float]],
    head: str,
    health: float | None,
    first_token: float | None,
) -> dict[str, float]:
    """Phase -> seconds from `t0` (see the module docstring); `seen`: node -> event kind ->
    when (`first_seen`). A phase not observed is left out."""
    at: dict[str, float | None] = {"process_started": process_started}
    weights = [n.get("weights_loaded", n.get("model_initialized")) for n in seen.values()]
    at["weights_loaded"] = max(w for w in weights if w is not None) if None not in weights else None
    h = seen.get(head, {})
    at["kv_allocated"] = h.get("kv_allocated", h.get("kv_cache"))
    at["port_open"] = h.get("port_open")
    at["health"] = health
    at["first_token"] = first_token
    return {p: round(max(0.0, t - t0), 2) for p in PHASES if (t := at[p]) is not None}


def regressions(previous: Mapping[str, float] | None, seconds: Mapping[str, float]) -> list[str]:
    """Each phase beyond REGRESSION and MIN_REGRESSION_SECONDS slower than `previous`."""
    if not previous:
        return []
    out = []
    for phase in PHASES:
        old, new = previous.get(phase), seconds.get(phase)
        if old is None or new is None:
            continue
        if new > old * (1 + REGRESSION) and new - old >= MIN_REGRESSION_SECONDS:
            out.append(
                f"{phase} {new:.1f} s, {new / old - 1:.0%} slower than the previous start "
                f"of this lock ({old:.1f} s)"
                if old > 0
                else f"{phase} {new:.1f} s (the previous start of this lock: 0 s)"
            )
    return out


FIRST_TOKEN_SECONDS = 300.0  # the first request after a start compiles kernels on CPU


def first_token_at(
    api_url: str,
    model: str,
    headers: Mapping[str, str] | None,
    transport: httpx.BaseTransport | None = None,
) -> float | None:
    """When the first token of a one-token streamed completion arrived (time.time), sent
    once the cluster is ready; None when none came within FIRST_TOKEN_SECONDS."""
    limits = Limits(total=FIRST_TOKEN_SECONDS, max_bytes=PROBE.max_bytes)
    with bounded_client(limits, transport, headers=dict(headers or {})) as client:
        return first_token(client, api_url, model, time.time)


def launch_lock(launches: Sequence[NodeLaunch]) -> str:
    """What a run on this machine starts, as one short hash: every node's argv and
    environment (the same recipe and plan give the same hash)."""
    parts = [
        [la.node, list(la.argv), [list(kv) for kv in la.env]]
        for la in sorted(launches, key=lambda la: la.node_rank)
    ]
    return "launch:" + hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def release_lock(release: str) -> str:
    """What a deployed run starts: its release (a release holds its lock)."""
    return f"release:{release}"


def record_start(
    recipe_name: str, kind: StartKind, lock: str, started_at: str, seconds: dict[str, float]
) -> StartPhases:
    """Compare with the previous start of `lock`, append to the run's series, return it."""
    before = last_start(recipe_name, lock)
    previous = before.seconds if before is not None else None
    start = StartPhases(
        kind=kind,
        lock=lock,
        started_at=started_at,
        seconds=seconds,
        previous=previous,
        regressions=regressions(previous, seconds),
    )
    append_start(recipe_name, start)
    return start


def timed_start(
    recipe_name: str,
    kind: StartKind,
    lock: str,
    started_at: str,
    seconds: dict[str, float],
    say: Callable[[str], None],
) -> StartPhases:
    """`record_start`, and one line of its phases (and one per regression) said."""
    start = record_start(recipe_name, kind, lock, started_at, seconds)
    say(f"start-up phases: {phases_line(start.seconds)}")
    for regression in start.regressions:
        say(f"warning: start-up regression: {regression}")
    return start


def phases_line(seconds: Mapping[str, float]) -> str:
    """`process_started 0.1 s, weights_loaded 31.2 s, ...` in phase order."""
    return ", ".join(f"{p} {seconds[p]:.1f} s" for p in PHASES if p in seconds)


__all__ = [
    "MIN_REGRESSION_SECONDS",
    "PHASES",
    "REGRESSION",
    "cluster_phases",
    "event_times",
    "first_token_at",
    "launch_lock",
    "phases_line",
    "record_start",
    "regressions",
    "release_lock",
    "seen_at",
    "stamp_seconds",
    "timed_start",
]

"""The cluster verdict from a series of looks, wedges included. Pure: no I/O, no clock.

Usage::

    verdict = classify(Observations(now=t, engine=samples, processes=procs, probe=probe,
                                    ever_ready=run.ready_at is not None))
    verdict.state      # READY | STARTING | DEGRADED | WEDGED | DOWN
    verdict.reasons    # sentences for `deskside status`, suspects named first
    verdict.suspects   # the node names the reasons point at

The caller keeps the series (oldest first is not required; samples are sorted here), on
one clock (`now` and every `at`). Inputs: deskside.survive.observe.

The states (READY, STARTING, DEGRADED, DOWN keep the meanings of `deskside status`):

- DOWN: every node's engine processes are gone (exited, or zombies).
- DEGRADED: some nodes' processes are gone; or the API stopped answering after it was
  ready; or the cluster is idle while an engine process is stopped (SIGSTOP: the next
  request would hang).
- STARTING: the API never answered yet; or, after it did, the first request has run
  longer than the stall threshold while log lines still arrive and CPU time advances
  (kernels compile or autotune on first use; bounded by Thresholds.first_request_seconds).
- WEDGED: requests run (or wait in the API server: accepted there and not finished, as
  its /load counts them; or deskside's probe is in flight) and no generation token came
  for Thresholds.stall_seconds while every process is alive (Thresholds.stopped_seconds
  with a process stopped). A request sent after a rank froze never reaches the core's
  counters (the core blocks in its collective and stops publishing them): the API
  server's count is what tells it from idle. The reasons name the
  suspects: processes stopped (T), in uninterruptible sleep (D) over the whole window,
  whose CPU time stopped advancing while others' advances, or whose log went silent while
  other nodes log. Typical cause on TP=2 across two nodes: one rank stuck in a collective
  (NCCL) or a kernel livelock while the API still answers /health.
- READY: otherwise; a stall that is a long prefill stays READY with a "busy: long prefill"
  reason: the prompt counter or the engine steps still move, or every rank's CPU time
  advances and a known prompt (the probe's, or the longest running one) is long enough to
  take this long at Thresholds.min_prefill_tokens_per_second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deskside.survive.observe import (
    STOPPED_STATES,
    EngineSample,
    Probe,
    ProcessSample,
    Thresholds,
    cpu_share,
    demand_since,
    history,
    last_change,
    latest_processes,
    moved_since,
    steadily,
    up_samples,
)

READY, STARTING, DEGRADED, WEDGED, DOWN = "READY", "STARTING", "DEGRADED", "WEDGED", "DOWN"


@dataclass(frozen=True)
class Observations:
    now: float
    engine: Sequence[EngineSample] = ()
    processes: Sequence[ProcessSample] = ()
    probe: Probe | None = None
    ever_ready: bool = False  # the API answered /health once in this run (ready_at)
    running_prompt_tokens: int | None = None  # the longest running prompt, when known


@dataclass(frozen=True)
class Verdict:
    state: str
    reasons: tuple[str, ...] = ()
    suspects: tuple[str, ...] = ()  # node names, sorted
    stalled_seconds: float | None = None  # no token this long while requests ran


@dataclass(frozen=True)
class Suspect:
    process: ProcessSample
    why: str
    hard: bool  # stopped, D, CPU flat: a hang by itself; a silent log only adds to one
    kind: str = ""  # stopped | log (merged per node in the reasons); others as they are


def _suspects(obs: Observations, since: float, limits: Thresholds) -> list[Suspect]:
    latest = [p for p in latest_processes(obs.processes).values() if not p.gone]
    shares = {
        (p.node, p.pid): cpu_share(history(obs.processes, p.node, p.pid), since)
        for p in latest
        if p.computes
    }
    window = obs.now - since
    out: list[Suspect] = []
    for p in latest:
        series = history(obs.processes, p.node, p.pid)
        share = shares.get((p.node, p.pid))
        others_advance = any(
            s is not None and s >= limits.flat_cpu_fraction
            for key, s in shares.items()
            if key != (p.node, p.pid)
        )
        others_log = any(
            q.node != p.node
            and q.log_silent_seconds is not None
            and q.log_silent_seconds < limits.stall_seconds
            for q in latest
        )
        if p.state in STOPPED_STATES:
            why = (
                f"{p.label} is stopped (state {p.state}): the other ranks wait for it in "
                f"their collectives; resume it with `kill -CONT {p.pid}` on {p.node}, or "
                "restart the run"
            )
            out.append(Suspect(p, why, hard=True, kind="stopped"))
        elif steadily(series, since, "D"):
            why = (
                f"{p.label} has been in uninterruptible sleep (state D) for {window:.0f} s: "
                "blocked in the kernel (GPU driver, storage, network)"
            )
            out.append(Suspect(p, why, hard=True))
        elif share is not None and share < limits.flat_cpu_fraction and others_advance:
            why = f"{p.label}: CPU time flat for {window:.0f} s while other ranks' advances"
            out.append(Suspect(p, why, hard=True))
        if (
            p.log_silent_seconds is not None
            and p.log_silent_seconds >= limits.stall_seconds
            and others_log
        ):
            why = f"{p.label}: no log line for {p.log_silent_seconds:.0f} s while other nodes log"
            out.append(Suspect(p, why, hard=False, kind="log"))
    return out


def _texts(suspects: Sequence[Suspect]) -> tuple[str, ...]:
    """The suspects' reasons, with a node's stopped processes in one sentence and its log
    silence said once."""
    out: list[str] = []
    seen: set[tuple[str, str]] = set()
    for s in suspects:
        key = (s.process.node, s.kind)
        if s.kind not in ("stopped", "log"):
            out.append(s.why)
            continue
        if key in seen:
            continue
        seen.add(key)
        group = [x.process for x in suspects if (x.process.node, x.kind) == key]
        p = group[0]
        where = f"{p.node} ({p.role})"
        if s.kind == "log":
            out.append(
                f"{where}: no log line for {p.log_silent_seconds:.0f} s while other nodes log"
            )
        elif len(group) == 1:
            out.append(s.why)
        else:
            pids = " ".join(str(x.pid) for x in group)
            named = ", ".join(
                f"{x.short_name} (pid {x.pid})" if x.name else f"pid {x.pid}" for x in group
            )
            out.append(
                f"{where}: {len(group)} engine processes are stopped (state T): {named}; the "
                f"other ranks wait for them in their collectives; resume them with `kill -CONT "
                f"{pids}` on {p.node}, or restart the run"
            )
    return tuple(out)


def _nodes(suspects: Sequence[Suspect]) -> tuple[str, ...]:
    return tuple(sorted({s.process.node for s in suspects}))


def _advancing(obs: Observations, since: float, limits: Thresholds) -> bool:
    """Every live rank's CPU time advances over the window (at least one is known)."""
    latest = [p for p in latest_processes(obs.processes).values() if not p.gone and p.computes]
    shares = [cpu_share(history(obs.processes, p.node, p.pid), since) for p in latest]
    known = [s for s in shares if s is not None]
    return bool(known) and all(s >= limits.flat_cpu_fraction for s in known)


def _logging(obs: Observations, limits: Thresholds) -> bool:
    """Some live process's log grew within the stall threshold."""
    return any(
        p.log_silent_seconds is not None and p.log_silent_seconds < limits.stall_seconds
        for p in latest_processes(obs.processes).values()
        if not p.gone
    )


def _gone(obs: Observations) -> Verdict | None:
    """DOWN or DEGRADED when processes are gone (exited or zombies)."""
    latest = latest_processes(obs.processes).values()
    gone = [p for p in latest if p.gone]
    if not gone:
        return None
    reasons = tuple(
        f"{p.label} is a zombie (state Z): it exited and its parent has not reaped it"
        if p.alive
        else f"{p.label} exited"
        for p in sorted(gone, key=lambda p: (p.node, p.pid))
    )
    down = {p.node for p in gone}
    state = DOWN if down >= {p.node for p in latest} else DEGRADED
    return Verdict(state, reasons, tuple(sorted(down)))


def _starting(obs: Observations, limits: Thresholds) -> Verdict:
    since = obs.now - limits.stall_seconds
    if _logging(obs, limits) and _advancing(obs, since, limits):
        why = "busy: starting: loading weights, compiling or autotuning kernels (log lines "
        why += "arriving, CPU time advancing)"
        return Verdict(STARTING, (why,))
    stuck = [s for s in _suspects(obs, since, limits) if s.hard]
    quiet = [
        p
        for p in latest_processes(obs.processes).values()
        if p.log_silent_seconds is not None and p.log_silent_seconds >= limits.stall_seconds
    ]
    reasons = list(_texts(stuck))
    if quiet and not _advancing(obs, since, limits):
        silent = min(p.log_silent_seconds or 0.0 for p in quiet)
        reasons.append(
            f"no log line for {silent:.0f} s and CPU time flat during start-up: it may be stuck"
        )
    return Verdict(STARTING, tuple(reasons), _nodes(stuck))


def classify(obs: Observations, limits: Thresholds | None = None) -> Verdict:
    """The verdict on `obs` (see the module docstring)."""
    limits = limits or Thresholds()
    gone = _gone(obs)
    if gone is not None:
        return gone
    newest = max(obs.engine, key=lambda s: s.at) if obs.engine else None
    if newest is None or not newest.up:
        if obs.ever_ready:
            return Verdict(DEGRADED, ("the engine API does not answer",))
        return _starting(obs, limits)
    if not obs.ever_ready:
        return _starting(obs, limits)

    ups = up_samples(obs.engine)
    since = demand_since(ups, obs.probe)
    window_start = obs.now - limits.stall_seconds
    stopped = [s for s in _suspects(obs, window_start, limits) if s.process.state in STOPPED_STATES]
    if since is None:  # idle
        if stopped:
            reasons = (*_texts(stopped), "the next request will hang")
            return Verdict(DEGRADED, reasons, _nodes(stopped))
        return Verdict(READY)
    changed = last_change(ups, "generation_tokens")
    if changed is None:
        why = "the engine exports no generation token counter: a stall cannot be told"
        return Verdict(READY, (why, *_texts(stopped)), _nodes(stopped))
    stalled = obs.now - max(since, changed)
    if stopped and stalled >= limits.stopped_seconds:
        return _wedged(newest, stalled, limits.stopped_seconds, stopped, stopped)
    if stalled < limits.stall_seconds:
        return Verdict(READY, _texts(stopped), _nodes(stopped), stalled)

    if moved_since(ups, "prompt_tokens", window_start) > 0:
        why = f"busy: long prefill: no new token for {stalled:.0f} s, prompt tokens still counted"
        return Verdict(READY, (why,), (), stalled)
    if moved_since(ups, "engine_steps", window_start) > 0:
        why = f"busy: long prefill: no new token for {stalled:.0f} s, the engine still steps"
        return Verdict(READY, (why,), (), stalled)

    suspects = _suspects(obs, window_start, limits)
    hard = [s for s in suspects if s.hard]
    advancing = _advancing(obs, window_start, limits)
    if not hard and advancing:
        done = newest.finished_requests or 0.0
        first = done <= 0 and not newest.generation_tokens
        if first and _logging(obs, limits) and stalled < limits.first_request_seconds:
            why = f"busy: the first request has run {stalled:.0f} s: kernels compile or "
            why += "autotune on first use (log lines arriving, CPU time advancing)"
            return Verdict(STARTING, (why,), (), stalled)
        prompts = [obs.running_prompt_tokens, obs.probe.prompt_tokens if obs.probe else None]
        prompt = max((n for n in prompts if n), default=0)
        if stalled < prompt / limits.min_prefill_tokens_per_second:
            why = f"busy: long prefill: a prompt of {prompt:,} tokens, no new token for "
            why += f"{stalled:.0f} s, every rank's CPU time advancing"
            return Verdict(READY, (why,), (), stalled)

    named = hard or suspects
    if not named:
        tail = "every process burns CPU" if advancing else "no process stands out"
        named_text = (
            f"{tail}: a rank may be stuck in a collective (NCCL) or a kernel; the nodes' "
            "engine logs and `py-spy dump --pid PID` on each rank show where"
        )
        headline = _headline(newest, stalled, limits.stall_seconds)
        return Verdict(WEDGED, (headline, named_text), (), stalled)
    return _wedged(newest, stalled, limits.stall_seconds, named, suspects)


def _headline(newest: EngineSample, stalled: float, threshold: float) -> str:
    running = newest.running or 0.0
    accepted = newest.accepted or 0.0
    if running > 0:
        what = f"{running:g} request(s) run"
    elif accepted > 0:
        what = f"{accepted:g} request(s) accepted by the API server wait for the engine"
    else:
        what = "deskside's probe waits"
    return (
        f"wedged: no token generated for {stalled:.0f} s while {what} (threshold "
        f"{threshold:.0f} s); every engine process is alive"
    )


def _wedged(
    newest: EngineSample,
    stalled: float,
    threshold: float,
    named: Sequence[Suspect],
    suspects: Sequence[Suspect],
) -> Verdict:
    headline = _headline(newest, stalled, threshold)
    return Verdict(WEDGED, (headline, *_texts(suspects)), _nodes(named), stalled)


__all__ = [
    "DEGRADED",
    "DOWN",
    "READY",
    "STARTING",
    "WEDGED",
    "EngineSample",
    "Observations",
    "Probe",
    "ProcessSample",
    "Thresholds",
    "Verdict",
    "classify",
]

"""What one look at a running cluster records, and what a series of looks says.

Pure data and arithmetic (no I/O): the engine's metric samples, deskside's probe request,
and per-process samples (the /proc/PID/stat state letter, CPU time, log silence). The
classifier (deskside.survive.classify) reads a whole series through the helpers here.

Which vLLM series move, and when (vLLM v1, vllm/v1/metrics/loggers.py PrometheusStatLogger
and vllm/v1/metrics/stats.py IterationStats.update_from_output):

- `vllm:generation_tokens_total` counts every sampled token, the first one of a request
  included: it moves when a request finishes its prefill and on every decode step.
- `vllm:prompt_tokens_total` counts a request's prompt when its prefill *completes*
  (Scheduler.update_from_output hands the request's PrefillStats over only with its first
  output token): during one long chunked prefill it stays still, like the token counter.
- `vllm:iteration_tokens_total` (a histogram, `_count` = engine steps that produced
  outputs) moves with every step that emits anything.

So during a single long prefill no engine series moves: only the ranks' CPU time (and, when
deskside sent the request, the prompt's length) tell it from a hang.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

# /proc/PID/stat field 3 (proc(5)): R running, S sleeping, D uninterruptible disk sleep,
# T stopped (by a signal), t tracing stop, Z zombie, X dead, I idle kernel thread.
STOPPED_STATES = ("T", "t")
GONE_STATES = ("Z", "X")


@dataclass(frozen=True)
class EngineSample:
    """One scrape of the head's /metrics at `at` (seconds on the observer's clock). The
    counters are sums over engines; None = the series was absent."""

    at: float
    up: bool  # /metrics answered
    running: float | None = None  # vllm:num_requests_running
    waiting: float | None = None  # vllm:num_requests_waiting
    generation_tokens: float | None = None  # vllm:generation_tokens_total
    prompt_tokens: float | None = None  # vllm:prompt_tokens_total
    engine_steps: float | None = None  # vllm:iteration_tokens_total_count
    finished_requests: float | None = None  # vllm:request_success_total (all reasons)
    # requests the API server accepted and has not finished: its /load ("server_load",
    # with --enable-server-load-tracking). The core's counters stop with the core (a rank
    # blocked in a collective): a request sent then is seen only here
    accepted: float | None = None


@dataclass(frozen=True)
class Probe:
    """A request deskside sent itself and has not seen answered yet."""

    started_at: float
    prompt_tokens: int | None = None  # its prompt's length, when deskside knows it


@dataclass(frozen=True)
class ProcessSample:
    """One look at one engine process (the API server, an engine core, a worker rank)."""

    at: float
    node: str
    role: str  # head | worker
    pid: int
    alive: bool  # the process exists (kill -0 / /proc/PID present)
    state: str | None = None  # /proc/PID/stat state letter: R S D T t Z X
    cpu_seconds: float | None = None  # utime + stime, in seconds (ticks / CLK_TCK)
    log_silent_seconds: float | None = None  # since the node's log last grew
    name: str | None = None  # e.g. "VllmWorker TP1", for the reasons
    computes: bool = True  # a rank or engine core; False for the API server and helpers,
    # whose CPU time idles while the ranks work (not compared with the ranks')

    @property
    def gone(self) -> bool:
        return not self.alive or (self.state or "") in GONE_STATES

    @property
    def short_name(self) -> str | None:
        return short_name(self.name) if self.name else None

    @property
    def label(self) -> str:
        what = f"{self.short_name} (pid {self.pid})" if self.name else f"pid {self.pid}"
        return f"{self.node} ({self.role}): {what}"


def short_name(command: str, width: int = 48) -> str:
    """A process's title as people read it: a title an engine set (`PREFIX::Role`, as
    vLLM's `...::Worker_TP1`) as is; `python -m mod verb ...` as `mod verb`; `python -c
    code` as `python -c <code start>`; else the program's file name and its first
    argument."""
    words = command.split()
    if not words or "::" in words[0]:
        return command[:width]
    if "-m" in words[:-1]:
        i = words.index("-m")
        rest = words[i + 1 : i + 3]
        text = " ".join(w for w in rest if not w.startswith(("/", "-")))
    elif "-c" in words[:-1]:
        text = "python -c " + " ".join(words[words.index("-c") + 1 :])
    else:
        text = " ".join([words[0].rsplit("/", 1)[-1], *words[1:2]])
    return text[:width]


@dataclass(frozen=True)
class Thresholds:
    """The limits the classifier applies (seconds unless named otherwise)."""

    stall_seconds: float = 60.0  # no token this long with requests running: a stall
    stopped_seconds: float = 10.0  # the same with a process stopped (T): a wedge sooner
    flat_cpu_fraction: float = 0.01  # CPU time over the window below this share of a core
    min_prefill_tokens_per_second: float = 100.0  # a known long prompt's slowest prefill
    first_request_seconds: float = 1800.0  # compile/autotune on the first request, at most


def latest_processes(samples: Sequence[ProcessSample]) -> dict[tuple[str, int], ProcessSample]:
    """The newest sample of every (node, pid), in (node, pid) order."""
    out: dict[tuple[str, int], ProcessSample] = {}
    for s in sorted(samples, key=lambda s: s.at):
        out[(s.node, s.pid)] = s
    return dict(sorted(out.items()))


def history(samples: Sequence[ProcessSample], node: str, pid: int) -> list[ProcessSample]:
    return sorted((s for s in samples if s.node == node and s.pid == pid), key=lambda s: s.at)


def cpu_share(series: Sequence[ProcessSample], since: float) -> float | None:
    """CPU time used per second of wall time from the last sample at or before `since` (or
    the oldest one) to the newest: 1.0 = one core busy. None without two CPU readings."""
    timed = [s for s in series if s.cpu_seconds is not None]
    if len(timed) < 2:
        return None
    older = [s for s in timed if s.at <= since]
    base = older[-1] if older else timed[0]
    last = timed[-1]
    span = last.at - base.at
    if span <= 0:
        return None
    return max(float(last.cpu_seconds or 0.0) - float(base.cpu_seconds or 0.0), 0.0) / span


def steadily(series: Sequence[ProcessSample], since: float, letter: str) -> bool:
    """The process was in state `letter` in every sample from `since` on, and was seen so
    at or before `since` (the state held over the whole window)."""
    window = [s for s in series if s.at >= since]
    before = [s for s in series if s.at <= since]
    return bool(window and before) and all(s.state == letter for s in [before[-1], *window])


def up_samples(engine: Sequence[EngineSample]) -> list[EngineSample]:
    return sorted((s for s in engine if s.up), key=lambda s: s.at)


def last_change(samples: Sequence[EngineSample], field: str) -> float | None:
    """When the counter `field` last changed (a decrease, an engine restart, counts); the
    first sample starts the clock. None when no sample carries the series."""
    carried = [s for s in samples if getattr(s, field) is not None]
    if not carried:
        return None
    changed = carried[0].at
    for prev, cur in pairwise(carried):
        if getattr(cur, field) != getattr(prev, field):
            changed = cur.at
    return changed


def moved_since(samples: Sequence[EngineSample], field: str, since: float) -> float:
    """How much the counter `field` grew from the last sample at or before `since` to the
    newest (0 when it did not, or cannot be told)."""
    carried = [s for s in samples if getattr(s, field) is not None]
    if len(carried) < 2:
        return 0.0
    older = [s for s in carried if s.at <= since]
    base = older[-1] if older else carried[0]
    return max(float(getattr(carried[-1], field)) - float(getattr(base, field)), 0.0)


def demanded(s: EngineSample) -> bool:
    """Requests run in the engine, or wait in the API server for it."""
    return (s.running or 0) > 0 or (s.accepted or 0) > 0


def demand_since(samples: Sequence[EngineSample], probe: Probe | None) -> float | None:
    """Since when requests have been running (or accepted by the API server and not
    finished) without a break (the oldest sample of the newest unbroken run of samples with
    demand), or the probe has been in flight: the earlier of the two. None when nothing
    runs and no probe is out."""
    start: float | None = None
    for s in reversed(samples):
        if not demanded(s):
            break
        start = s.at
    if probe is not None:
        start = probe.started_at if start is None else min(start, probe.started_at)
    return start

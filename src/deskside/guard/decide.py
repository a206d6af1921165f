"""When the guard acts: pure decisions over samples of (time, available bytes).

Available memory under the floor starts a count; any sample at or over the floor (or a
sample that could not be read) ends it. When the count reaches the window the guard acts,
once: the count restarts after an action, so a stop that does not free memory is not
repeated every sample."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["ok", "low", "act", "unknown"]


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    low_since: float | None  # when the current run of low samples began; None: not low
    low_seconds: float  # how long available has stayed under the floor (0: not low)


def decide(
    low_since: float | None, now: float, available: int | None, floor: int, window: float
) -> Decision:
    """One sample at `now` (monotonic seconds), given when the current low run began."""
    if available is None:
        return Decision("unknown", None, 0.0)  # never act without evidence
    if available >= floor:
        return Decision("ok", None, 0.0)
    since = now if low_since is None else low_since
    low = max(now - since, 0.0)
    if low >= window:
        return Decision("act", None, low)
    return Decision("low", since, low)

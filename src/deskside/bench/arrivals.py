"""Open-loop arrival schedules - pure functions.

A schedule is the list of send times (seconds from the cell's start) of an open-loop cell:
requests leave at these times whatever the server is doing. The first request leaves at 0;
the gaps after it are

- ``poisson``: exponential with mean 1 / rate, drawn from a generator seeded by the run's
  seed and the cell (so a run can be repeated exactly), as in ``vllm bench serve
  --request-rate R`` (its default burstiness 1.0);
- ``constant``: exactly 1 / rate (send time i is i / rate, computed directly so no rounding
  accumulates).

The schedule ends after ``count`` requests or before ``duration_s``, whichever comes first.
"""

from __future__ import annotations

import random
from typing import Literal, get_args

Arrivals = Literal["poisson", "constant"]
ARRIVALS: tuple[str, ...] = get_args(Arrivals)


def arrival_times(
    rate: float,
    kind: Arrivals = "poisson",
    *,
    count: int | None = None,
    duration_s: float | None = None,
    seed: object = 0,
) -> list[float]:
    """Send times from 0 at ``rate`` requests/s; at least one of count / duration_s."""
    if not rate > 0:
        raise ValueError(f"the request rate must be positive, not {rate!r}")
    if count is None and duration_s is None:
        raise ValueError("a schedule needs a request count or a duration")
    if kind not in ARRIVALS:
        raise ValueError(f"arrivals must be one of {', '.join(ARRIVALS)}, not {kind!r}")
    limit = count if count is not None else None
    times: list[float] = []
    rng = random.Random(f"deskside-bench-arrivals:{seed}")
    t = 0.0
    while limit is None or len(times) < limit:
        if kind == "constant":
            t = len(times) / rate
        elif times:
            t += rng.expovariate(rate)
        if duration_s is not None and t >= duration_s:
            break
        times.append(t)
    return times


def schedule_rate(times: list[float]) -> float | None:
    """The rate a list of send times realises: (n - 1) / (last - first); None below two.

    Counting intervals rather than requests makes a constant schedule's rate exact and is
    the same estimate for scheduled and for actual send times."""
    if len(times) < 2:
        return None
    span = max(times) - min(times)
    return (len(times) - 1) / span if span > 0 else None

"""The client watching itself: is it the bottleneck?

A sampler task asks the event loop to wake it every ``interval_s`` (20 ms); how late it wakes is
the loop's lag - the delay any chunk arriving at that moment would have had before its
timestamp was read. Process CPU time over the window says how busy the client was (one
asyncio loop uses at most one core). A cell is unreliable when the lag's p99 or the CPU
fraction passes its threshold. CPU is the whole process's: a server run in the same process
(tests) counts too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

from deskside.bench.metrics import percentile
from deskside.bench.models import ClientHealth


class LoopMonitor:
    def __init__(
        self,
        interval_s: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._wall0 = self._cpu0 = 0.0
        self.wall_s = self.cpu_s = 0.0

    async def _sample(self) -> None:
        while True:
            expected = self.clock() + self.interval_s
            await asyncio.sleep(self.interval_s)
            self.lags.append(max(0.0, self.clock() - expected))

    def start(self) -> None:
        self.lags = []
        self._wall0, self._cpu0 = self.clock(), self.cpu_clock()
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def stop(self) -> None:
        self.wall_s = self.clock() - self._wall0
        self.cpu_s = self.cpu_clock() - self._cpu0
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def health(self, max_loop_lag_ms: float, max_cpu: float) -> ClientHealth:
        return client_health(self.lags, self.cpu_s, self.wall_s, max_loop_lag_ms, max_cpu)


def client_health(
    lags_s: Sequence[float],
    cpu_s: float,
    wall_s: float,
    max_loop_lag_ms: float,
    max_cpu: float,
) -> ClientHealth:
    """Pure verdict from the samples."""
    data = sorted(lags_s)
    p50 = percentile(data, 50) * 1e3 if data else 0.0
    p99 = percentile(data, 99) * 1e3 if data else 0.0
    worst = data[-1] * 1e3 if data else 0.0
    fraction = cpu_s / wall_s if wall_s > 0 else 0.0
    reasons = []
    if p99 > max_loop_lag_ms:
        reasons.append(f"event-loop lag p99 {p99:.1f} ms > {max_loop_lag_ms:g} ms")
    if fraction > max_cpu:
        reasons.append(f"client CPU {fraction:.0%} of a core > {max_cpu:.0%}")
    return ClientHealth(
        wall_s=wall_s,
        cpu_s=cpu_s,
        cpu_fraction=fraction,
        loop_lag_samples=len(data),
        loop_lag_p50_ms=p50,
        loop_lag_p99_ms=p99,
        loop_lag_max_ms=worst,
        reliable=not reasons,
        reasons=reasons,
    )

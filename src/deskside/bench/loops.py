"""How a cell's requests leave: closed loop (workers) or open loop (a schedule).

- closed loop: ``concurrency`` workers, each sending its next request as soon as its
  previous one ends;
- open loop: each request leaves at its scheduled time whatever the server is doing (a
  late wake-up sends at once, so lateness never accumulates); with ``max_in_flight``, a
  request due while that many are in flight is dropped, not queued (queueing would turn
  the arrivals back into a closed loop).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from deskside.bench.client import BenchClient, StreamRequest
from deskside.bench.models import RequestRecord

Clock = Callable[[], float]
OnDone = Callable[[RequestRecord], None]


async def closed_loop(
    client: BenchClient,
    requests: list[StreamRequest],
    concurrency: int,
    epoch: float,
    deadline: float | None,
    on_done: OnDone,
    clock: Clock,
) -> list[RequestRecord]:
    queue = deque(requests)
    records: list[RequestRecord] = []

    async def worker() -> None:
        while queue and (deadline is None or clock() < deadline):
            record = await client.stream(queue.popleft(), epoch)
            records.append(record)
            on_done(record)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    records.sort(key=lambda r: r.index)
    return records


@dataclass
class OpenLoopRun:
    records: list[RequestRecord] = field(default_factory=list)
    scheduled_s: list[float] = field(default_factory=list)  # every due time, from the epoch
    dropped: int = 0
    peak_in_flight: int = 0


async def open_loop(
    client: BenchClient,
    requests: list[StreamRequest],
    offsets_s: list[float],
    epoch: float,
    max_in_flight: int | None,
    on_done: OnDone,
    clock: Clock,
) -> OpenLoopRun:
    """Send ``requests[i]`` at ``offsets_s[i]`` seconds after now; wait for every answer."""
    run = OpenLoopRun()
    start = clock()
    in_flight = 0
    tasks: list[asyncio.Task[None]] = []

    async def send(request: StreamRequest, due: float) -> None:
        nonlocal in_flight
        try:
            record = await client.stream(request, epoch)
        finally:
            in_flight -= 1
        record.scheduled_s = due - epoch
        run.records.append(record)
        on_done(record)

    for request, offset in zip(requests, offsets_s, strict=True):
        due = start + offset
        # uvloop's timers have millisecond resolution and may fire early: sleep again
        while (delay := due - clock()) > 0:
            await asyncio.sleep(delay)
        run.scheduled_s.append(due - epoch)
        if max_in_flight is not None and in_flight >= max_in_flight:
            run.dropped += 1
            continue
        in_flight += 1
        run.peak_in_flight = max(run.peak_in_flight, in_flight)
        tasks.append(asyncio.create_task(send(request, due)))
        await asyncio.sleep(0)  # let it write now, not at the next due time
    await asyncio.gather(*tasks)
    run.records.sort(key=lambda r: r.index)
    return run

"""One open-loop cell: requests at a target rate, sent on schedule whatever the server does.

Prompts are built before the clock starts; a short warm-up (default 2 requests, at once)
opens connections; ``/metrics`` is scraped; the schedule (:func:`arrival_times`: ``requests``
arrivals, or those before ``duration_s``; neither: 10 s worth, at least 8) is played by
:func:`deskside.bench.loops.open_loop`; the cell waits for every answer and scrapes again.
"""

from __future__ import annotations

import math

from deskside.bench.arrivals import arrival_times
from deskside.bench.breakdown import open_loop_stats
from deskside.bench.context import Progress, RunContext
from deskside.bench.loops import closed_loop, open_loop
from deskside.bench.metrics import cell_metrics
from deskside.bench.models import CellResult
from deskside.bench.monitor import LoopMonitor
from deskside.bench.scrape import cell_window, try_scrape
from deskside.bench.workload import Cell, cell_prompts, stream_request

DEFAULT_SCHEDULE_S = 10.0
DEFAULT_WARMUP = 2


def schedule_for(ctx: RunContext, cell: Cell) -> list[float]:
    config = ctx.config
    rate = cell.request_rate
    assert rate is not None
    count = config.requests
    if count is None and config.duration_s is None:
        count = max(8, math.ceil(DEFAULT_SCHEDULE_S * rate))
    return arrival_times(
        rate,
        config.arrivals,
        count=count,
        duration_s=config.duration_s,
        seed=f"{config.seed}:{cell.prompt_len}:{rate:g}",
    )


async def run_open_cell(ctx: RunContext, cell: Cell) -> CellResult:
    config, rate = ctx.config, cell.request_rate
    assert rate is not None
    offsets = schedule_for(ctx, cell)
    n_warm = config.warmup if config.warmup is not None else DEFAULT_WARMUP
    ctx.progress(Progress("prompts", cell, 0, n_warm + len(offsets), "building prompts"))
    calibration: dict[str, float] = {}
    warm_prompts = await cell_prompts(ctx.counter, config, cell, "w", n_warm, calibration)
    prompts = await cell_prompts(ctx.counter, config, cell, "r", len(offsets), calibration)
    warm = [
        stream_request(config, ctx.model, i, p, config.warmup_max_tokens, warmup=True)
        for i, p in enumerate(warm_prompts)
    ]
    measured = [
        stream_request(config, ctx.model, i, p, config.max_tokens) for i, p in enumerate(prompts)
    ]
    on_warm = ctx.counting("warmup", cell, len(warm))
    warm_records = await closed_loop(
        ctx.client, warm, max(1, len(warm)), ctx.epoch, None, on_warm, ctx.clock
    )
    before, scrape_error = await try_scrape(ctx.client, ctx.metrics_url)

    monitor = LoopMonitor(clock=ctx.clock)
    monitor.start()
    run = await open_loop(
        ctx.client,
        measured,
        offsets,
        ctx.epoch,
        config.max_in_flight,
        ctx.counting("measure", cell, len(measured)),
        ctx.clock,
    )
    await monitor.stop()

    metrics = cell_metrics(run.records, cell.concurrency)
    server = await cell_window(
        ctx, before, scrape_error, metrics.output_tokens, metrics.prompt_tokens
    )
    stats = open_loop_stats(
        run.records,
        run.scheduled_s,
        rate,
        config.arrivals,
        run.dropped,
        config.max_in_flight,
        run.peak_in_flight,
    )
    ctx.progress(Progress("cell-done", cell, len(run.records), len(run.records)))
    return CellResult(
        prompt_len=cell.prompt_len,
        concurrency=cell.concurrency,
        request_rate=rate,
        metrics=metrics,
        client=monitor.health(config.max_loop_lag_ms, config.max_client_cpu),
        server=server,
        warmup_requests=len(warm_records),
        requests=[*warm_records, *run.records],
        open_loop=stats,
    )

"""``run_bench(config) -> BenchResult``: the matrix, cell by cell, or the context probe.

For each cell: build its prompts (exact length, before the clock starts), warm up at the
cell's concurrency (connections opened, excluded from every figure), scrape ``/metrics``,
run the measured requests closed-loop (``concurrency`` workers, each sending its next
request as soon as its previous one ends), scrape again once the server's counters have
caught up, and compute the client-side metrics, the server-side window and the client's
own health. Open-loop cells (a request rate) are run by :mod:`deskside.bench.open_cell`,
multi-turn cells by :mod:`deskside.bench.turns`. Nothing here prints: progress goes to a
callback.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from deskside.bench.breakdown import backend_stats, goodput
from deskside.bench.client import BenchClient, StreamClient
from deskside.bench.context import Progress, ProgressFn, RunContext
from deskside.bench.loops import closed_loop
from deskside.bench.metrics import cell_metrics
from deskside.bench.models import (
    BenchConfig,
    BenchResult,
    CellResult,
    ProbeResult,
    Tokenization,
)
from deskside.bench.monitor import LoopMonitor
from deskside.bench.open_cell import run_open_cell
from deskside.bench.scrape import cell_window, metrics_url_for, try_scrape
from deskside.bench.turns import run_turns_cell
from deskside.bench.workload import (
    Cell,
    LocalTokenCounter,
    PromptError,
    ServerTokenCounter,
    TokenCounter,
    build_prompt,
    cell_prompts,
    matrix,
    prompt_words,
    stream_request,
    words_needed,
)
from deskside.errors import DesksideError, UsageError
from deskside.terminal import snippet

__all__ = ["Progress", "ProgressFn", "ServerUnreachable", "arun_bench", "run_bench"]


class ServerUnreachable(DesksideError):
    exit_code = 4


def _deskside_version() -> str:
    try:
        return version("deskside")
    except PackageNotFoundError:
        return "unknown"


async def _server_info(
    client: BenchClient, config: BenchConfig
) -> tuple[str, int | None, str | None]:
    try:
        status, models = await client.get_json("/v1/models")
    except Exception as exc:
        raise ServerUnreachable(
            f"cannot reach {config.url}: {exc or type(exc).__name__}",
            hint="is the server up? deskside bench --url http://HOST:PORT",
        ) from None
    cards = models.get("data", []) if status == 200 and isinstance(models, dict) else []
    model = config.model
    if model is None:
        if not cards:
            raise UsageError(
                f"{config.url}/v1/models lists no model (HTTP {status})", hint="pass --model NAME"
            )
        model = str(cards[0]["id"])
    max_len = next(
        (c.get("max_model_len") for c in cards if c.get("id") == model and c.get("max_model_len")),
        None,
    )
    server_version = None
    try:
        status, answer = await client.get_json("/version")
        if status == 200 and isinstance(answer, dict):
            server_version = str(answer.get("version"))
    except Exception:
        server_version = None
    return model, (int(max_len) if max_len else None), server_version


async def _choose_counter(
    client: BenchClient, config: BenchConfig, model: str
) -> tuple[TokenCounter, Tokenization]:
    server = ServerTokenCounter(client.post_json, model, config.endpoint)
    try:
        await server.count("hello")
        return server, Tokenization(method=server.method, exact=True)
    except (PromptError, OSError, ValueError) as exc:
        reason = str(exc)
    except Exception as exc:  # httpx transport errors
        reason = f"{type(exc).__name__}: {exc}"
    if config.tokenizer is None:
        raise UsageError(
            f"the server's /tokenize is not usable ({snippet(reason)})",
            hint="pass --tokenizer PATH (a tokenizer.json or its folder) to count locally",
        )
    local = LocalTokenCounter(config.tokenizer, config.endpoint)
    notes = [f"server /tokenize not usable ({snippet(reason)}); counted with {local.method}"]
    if config.endpoint == "chat" and not local.chat_template_used:
        notes.append("no chat template found locally: chat prompt lengths are approximate")
    return local, Tokenization(method=local.method, exact=local.chat_template_used, notes=notes)


async def _run_cell(ctx: RunContext, cell: Cell) -> CellResult:
    config, progress = ctx.config, ctx.progress
    n_warm = config.warmup_for(cell.concurrency)
    n_req = config.requests_for(cell.concurrency)
    if config.duration_s is not None and config.requests is None:
        n_req = 8 * cell.concurrency
    progress(Progress("prompts", cell, 0, n_warm + n_req, "building prompts"))
    calibration: dict[str, float] = {}
    warm_prompts = await cell_prompts(ctx.counter, config, cell, "w", n_warm, calibration)
    prompts = await cell_prompts(ctx.counter, config, cell, "r", n_req, calibration)
    warm = [
        stream_request(config, ctx.model, i, p, config.warmup_max_tokens, warmup=True)
        for i, p in enumerate(warm_prompts)
    ]
    measured = [
        stream_request(config, ctx.model, i, p, config.max_tokens) for i, p in enumerate(prompts)
    ]
    on_warm = ctx.counting("warmup", cell, len(warm))
    warm_records = await closed_loop(
        ctx.client, warm, cell.concurrency, ctx.epoch, None, on_warm, ctx.clock
    )
    before, scrape_error = await try_scrape(ctx.client, ctx.metrics_url)

    monitor = LoopMonitor(clock=ctx.clock)
    monitor.start()
    deadline = ctx.clock() + config.duration_s if config.duration_s is not None else None
    on_measured = ctx.counting("measure", cell, len(measured))
    records = await closed_loop(
        ctx.client, measured, cell.concurrency, ctx.epoch, deadline, on_measured, ctx.clock
    )
    await monitor.stop()

    metrics = cell_metrics(records, cell.concurrency)
    server = await cell_window(
        ctx, before, scrape_error, metrics.output_tokens, metrics.prompt_tokens
    )
    result = CellResult(
        prompt_len=cell.prompt_len,
        concurrency=cell.concurrency,
        metrics=metrics,
        client=monitor.health(config.max_loop_lag_ms, config.max_client_cpu),
        server=server,
        warmup_requests=len(warm_records),
        requests=[*warm_records, *records],
    )
    progress(Progress("cell-done", cell, len(records), len(records)))
    return result


async def _any_cell(ctx: RunContext, cell: Cell) -> CellResult:
    """Run a cell in its mode, then add what every mode reports: goodput (open loop, or
    objectives set), the backends behind a proxy, a prefix cache the usage hides."""
    if cell.request_rate is not None:
        result = await run_open_cell(ctx, cell)
    elif ctx.config.turns > 1:
        result = await run_turns_cell(ctx, cell)
    else:
        result = await _run_cell(ctx, cell)
    if ctx.config.slo or result.request_rate is not None:
        result.goodput = goodput(result.requests, ctx.config.slo)
    result.backends = backend_stats(result.requests)
    server = result.server
    if server is not None and server.prefix_cache_hits and not result.metrics.cached_tokens:
        server.notes.append(
            "the server's prefix cache hit but its responses report no cached tokens "
            "(vLLM: --enable-prompt-tokens-details): prefill tok/s counts them as computed"
        )
    return result


async def _probe(
    client: BenchClient,
    config: BenchConfig,
    model: str,
    counter: TokenCounter,
    max_len: int | None,
    epoch: float,
    progress: ProgressFn,
) -> ProbeResult:
    target = int(config.probe_context or 0)
    limit = config.max_model_len or max_len
    if limit is not None and target + config.probe_max_tokens > limit:
        raise UsageError(
            f"--probe-context {target} plus {config.probe_max_tokens} output tokens exceeds "
            f"max_model_len {limit}",
            hint=f"probe at most {limit - config.probe_max_tokens} tokens",
        )
    progress(Progress("probe", None, 0, 1, f"building a {target}-token prompt"))
    words = prompt_words(config.seed, f"probe:{target}", words_needed(target))
    prompt = await build_prompt(counter, target, words)
    request = stream_request(config, model, 0, prompt, config.probe_max_tokens)
    progress(Progress("probe", None, 0, 1, f"sending {prompt.tokens} prompt tokens"))
    record = await client.stream(request, epoch)
    progress(Progress("probe", None, 1, 1))
    prefill = None
    if record.ok and record.ttft_s and record.prompt_tokens is not None:
        prefill = (record.prompt_tokens - (record.cached_tokens or 0)) / record.ttft_s
    return ProbeResult(
        target_tokens=target,
        max_model_len=limit,
        accepted=record.ok and record.prompt_tokens is not None,
        prompt_tokens=record.prompt_tokens,
        cached_tokens=record.cached_tokens,
        output_tokens=record.output_tokens,
        ttft_s=record.ttft_s,
        prefill_tok_s=prefill,
        error=record.error,
        record=record,
    )


async def arun_bench(
    config: BenchConfig,
    client: BenchClient | None = None,
    progress: ProgressFn | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> BenchResult:
    """Run the configured matrix (or the probe) against ``config.url``."""
    report: ProgressFn = progress or (lambda _: None)
    if config.seed is None:
        config = config.model_copy(update={"seed": random.SystemRandom().randrange(1 << 31)})
    own = client is None
    bench_client: BenchClient = client or StreamClient(
        config.url, config.api_key, config.timeout_s, clock
    )
    try:
        model, max_len, server_version = await _server_info(bench_client, config)
        counter, tokenization = await _choose_counter(bench_client, config, model)
        if max_len is None and isinstance(counter, ServerTokenCounter):
            max_len = counter.max_model_len
        result = BenchResult(
            deskside_version=_deskside_version(),
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            url=config.url,
            model=model,
            endpoint=config.endpoint,
            server_version=server_version,
            config=config,
            tokenization=tokenization,
        )
        epoch = clock()
        result.clock_epoch_s = epoch
        if config.probe_context is not None:
            result.probe = await _probe(
                bench_client, config, model, counter, max_len, epoch, report
            )
            return result
        metrics_url = None
        if config.scrape_metrics:
            metrics_url = metrics_url_for(config.url, config.metrics_url)
        ctx = RunContext(bench_client, config, model, counter, epoch, metrics_url, report, clock)
        for cell in matrix(config):
            # a conversation's last turn carries every earlier prompt and reply
            needed = config.turns * (cell.prompt_len + config.max_tokens)
            if max_len is not None and needed > max_len:
                what = "prompt + max_tokens" if config.turns == 1 else f"{config.turns} turns"
                result.notes.append(
                    f"skipped prompt {cell.prompt_len} x {_load(cell)}: "
                    f"{what} exceeds max_model_len {max_len}"
                )
                continue
            result.cells.append(await _any_cell(ctx, cell))
        return result
    finally:
        if own:
            await bench_client.aclose()


def run_bench(
    config: BenchConfig,
    client: BenchClient | None = None,
    progress: ProgressFn | None = None,
) -> BenchResult:
    """Synchronous face of :func:`arun_bench`: runs it on its own event loop - uvloop
    (libuv) where it is installed, since the client's cost per streamed chunk is mostly the
    event loop's own; asyncio's default loop otherwise."""
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(arun_bench(config, client, progress))


def _load(cell: Cell) -> str:
    if cell.request_rate is None:
        return f"concurrency {cell.concurrency}"
    return f"{cell.request_rate:g} requests/s"


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def config_from(**values: Any) -> BenchConfig:
    """Build a config, turning validation errors into a user-facing error."""
    from pydantic import ValidationError

    try:
        return BenchConfig(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"bad bench setting {where}: {first['msg']}") from None

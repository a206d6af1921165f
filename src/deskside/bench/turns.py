"""Multi-turn conversations: each turn resends the whole history, so the context grows and
the server's prefix cache can serve what it has seen.

A cell runs ``conversations`` conversations (default: its concurrency) of ``turns`` turns.
Turn k of a conversation sends its earlier user messages and the model's actual replies,
then a new user message of the cell's prompt length (random words, built before the clock
starts). The conversations move from turn to turn together - at most ``concurrency``
requests in flight, the next turn once every conversation has its reply - so ``/metrics``
can be scraped between turns: the prefix-cache counters' differences (vLLM v1:
``vllm:prefix_cache_queries`` and ``vllm:prefix_cache_hits``, in tokens) are then per turn
as well as over the cell. Each request's exact length (the whole conversation's) is
counted before it is sent, and compared with ``usage.prompt_tokens`` as for any request;
``usage.prompt_tokens_details.cached_tokens`` is summed per turn when the server gives it.
A conversation whose request fails sends no further turns.
"""

from __future__ import annotations

from deskside.bench import server_metrics
from deskside.bench.breakdown import turn_stats
from deskside.bench.client import StreamRequest
from deskside.bench.context import Progress, RunContext
from deskside.bench.loops import closed_loop
from deskside.bench.metrics import cell_metrics
from deskside.bench.models import CellResult, RequestRecord, ServerWindow
from deskside.bench.monitor import LoopMonitor
from deskside.bench.scrape import cell_window, server_window, try_scrape
from deskside.bench.workload import (
    Cell,
    Prompt,
    build_prompt,
    cell_prompts,
    prompt_words,
    stream_request,
    words_needed,
)

Message = dict[str, str]


async def _history_tokens(ctx: RunContext, history: list[Message], text: str) -> int:
    if ctx.config.endpoint == "chat":
        return await ctx.counter.count_messages([*history, {"role": "user", "content": text}])
    return await ctx.counter.count(" ".join([*(m["content"] for m in history), text]))


async def _user_messages(ctx: RunContext, cell: Cell, conversations: int) -> list[list[Prompt]]:
    config = ctx.config
    calibration: dict[str, float] = {}
    out = []
    for c in range(conversations):
        row = []
        for k in range(1, config.turns + 1):
            key = f"{cell.prompt_len}:{cell.concurrency}:conversation{c}:turn{k}"
            words = prompt_words(config.seed, key, words_needed(cell.prompt_len))
            row.append(await build_prompt(ctx.counter, cell.prompt_len, words, calibration))
        out.append(row)
    return out


async def run_turns_cell(ctx: RunContext, cell: Cell) -> CellResult:
    config, client = ctx.config, ctx.client
    conversations = config.conversations or cell.concurrency
    n_warm = config.warmup_for(cell.concurrency)
    total = n_warm + conversations * config.turns
    ctx.progress(Progress("prompts", cell, 0, total, "building prompts"))
    users = await _user_messages(ctx, cell, conversations)
    warm = [
        stream_request(config, ctx.model, i, p, config.warmup_max_tokens, warmup=True)
        for i, p in enumerate(await cell_prompts(ctx.counter, config, cell, "w", n_warm, {}))
    ]
    on_warm = ctx.counting("warmup", cell, len(warm))
    warm_records = await closed_loop(
        client, warm, cell.concurrency, ctx.epoch, None, on_warm, ctx.clock
    )
    first, scrape_error = await try_scrape(client, ctx.metrics_url)

    monitor = LoopMonitor(clock=ctx.clock)
    monitor.start()
    histories: list[list[Message]] = [[] for _ in range(conversations)]
    alive = [True] * conversations
    records: list[RequestRecord] = []
    turn_windows: dict[int, ServerWindow] = {}
    before, after = first, first
    for turn in range(1, config.turns + 1):
        owner: dict[int, int] = {}
        requests: list[StreamRequest] = []
        for c in (c for c in range(conversations) if alive[c]):
            user = users[c][turn - 1]
            length = user.tokens
            if histories[c]:
                length = await _history_tokens(ctx, histories[c], user.text)
            index = len(records) + len(requests)
            owner[index] = c
            prompt = Prompt(user.text, length, length)
            history = list(histories[c])
            requests.append(
                stream_request(config, ctx.model, index, prompt, config.max_tokens, history=history)
            )
        if not requests:
            break
        if before is None and turn > 1:
            before, _ = await try_scrape(client, ctx.metrics_url)
        on_done = ctx.counting(f"turn {turn}", cell, len(requests))
        done = await closed_loop(
            client, requests, cell.concurrency, ctx.epoch, None, on_done, ctx.clock
        )
        for r in done:
            c = owner[r.index]
            r.conversation, r.turn = c, turn
            alive[c] = r.ok
            histories[c] += [
                {"role": "user", "content": users[c][turn - 1].text},
                {"role": "assistant", "content": r.reply or ""},
            ]
        records.extend(done)
        after = None
        if ctx.metrics_url and before is not None:
            ok = [r for r in done if r.ok]
            window, after = await server_window(
                client,
                ctx.metrics_url,
                before,
                None,
                ctx.model,
                sum(r.output_tokens or 0 for r in ok),
                sum(r.prompt_tokens or 0 for r in ok),
                ctx.clock,
            )
            if window.scraped:
                turn_windows[turn] = window
        before = after
    await monitor.stop()

    metrics = cell_metrics(records, cell.concurrency)
    server = None
    if ctx.metrics_url:
        if first is not None and after is not None:
            server = server_metrics.window(
                first, after, ctx.model, metrics.output_tokens, metrics.prompt_tokens
            )
        else:
            server = await cell_window(
                ctx, first, scrape_error, metrics.output_tokens, metrics.prompt_tokens
            )
    per_turn = turn_stats(records)
    for row in per_turn:
        if (w := turn_windows.get(row.turn)) is not None:
            row.server_prefix_queries = w.prefix_cache_queries
            row.server_prefix_hits = w.prefix_cache_hits
            row.server_hit_rate = w.prefix_cache_hit_rate
    ctx.progress(Progress("cell-done", cell, len(records), len(records)))
    return CellResult(
        prompt_len=cell.prompt_len,
        concurrency=cell.concurrency,
        metrics=metrics,
        client=monitor.health(config.max_loop_lag_ms, config.max_client_cpu),
        server=server,
        warmup_requests=len(warm_records),
        requests=[*warm_records, *records],
        turns=per_turn,
    )

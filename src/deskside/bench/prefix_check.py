"""A short multi-turn bench whose answer is the server's own prefix-cache count: for a test
(or a person) asking "does this server's prefix cache serve a growing conversation?"."""

from __future__ import annotations

from dataclasses import dataclass

from deskside.bench.models import BenchConfig, BenchResult
from deskside.bench.runner import run_bench


@dataclass(frozen=True)
class PrefixCacheCheck:
    """``cached_tokens``: the difference of ``vllm:prefix_cache_hits`` (tokens) over the
    measured turns, None when the server exports no such counter or /metrics could not be
    read; ``per_turn_*`` are indexed by turn - 1."""

    cached_tokens: float | None
    queried_tokens: float | None
    per_turn_hits: list[float | None]
    per_turn_usage_cached: list[int | None]
    result: BenchResult


def prefix_cache_over_turns(
    url: str,
    *,
    model: str | None = None,
    turns: int = 3,
    conversations: int = 2,
    prompt_len: int = 128,
    max_tokens: int = 16,
    api_key: str | None = None,
    metrics_url: str | None = None,
    tokenizer: str | None = None,
    timeout_s: float = 600.0,
) -> PrefixCacheCheck:
    """Run ``conversations`` conversations of ``turns`` turns (chat, all at once) against
    ``url`` and return the prefix-cache counters' differences.

    Each turn after the first resends the conversation so far, so a server with prefix
    caching should report hits of at least the previous turn's prompt (less a partial
    block) per conversation from turn 2 on; turn 1's prompts are fresh random words."""
    config = BenchConfig(
        url=url,
        model=model,
        prompt_lens=[prompt_len],
        concurrency=[conversations],
        conversations=conversations,
        turns=turns,
        max_tokens=max_tokens,
        api_key=api_key,
        metrics_url=metrics_url,
        tokenizer=tokenizer,
        timeout_s=timeout_s,
    )
    result = run_bench(config)
    cell = result.cells[0] if result.cells else None
    server = cell.server if cell is not None else None
    rows = cell.turns if cell is not None else []
    return PrefixCacheCheck(
        cached_tokens=server.prefix_cache_hits if server is not None else None,
        queried_tokens=server.prefix_cache_queries if server is not None else None,
        per_turn_hits=[t.server_prefix_hits for t in rows],
        per_turn_usage_cached=[t.cached_tokens for t in rows],
        result=result,
    )

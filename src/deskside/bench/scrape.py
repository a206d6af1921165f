"""The server's ``/metrics`` around a window: scrape before, scrape after once the counters
have caught up with the client's own count, and take the differences
(:mod:`deskside.bench.server_metrics`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from deskside.bench import server_metrics
from deskside.bench.client import BenchClient
from deskside.bench.context import RunContext
from deskside.bench.models import ServerWindow


async def scrape(client: BenchClient, url: str) -> server_metrics.Snapshot:
    status, text = await client.get_text(url)
    if status != 200:
        raise OSError(f"HTTP {status} from {url}")
    return server_metrics.parse_metrics(text)


async def try_scrape(
    client: BenchClient, url: str | None
) -> tuple[server_metrics.Snapshot | None, str | None]:
    """A snapshot, or why there is none."""
    if url is None:
        return None, "metrics not scraped"
    try:
        return await scrape(client, url), None
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


async def server_window(
    client: BenchClient,
    metrics_url: str,
    before: server_metrics.Snapshot | None,
    scrape_error: str | None,
    model: str,
    output_tokens: int,
    prompt_tokens: int,
    clock: Callable[[], float],
) -> tuple[ServerWindow, server_metrics.Snapshot | None]:
    """The window's differences and the closing snapshot (None when scraping failed)."""
    if before is None:
        return server_metrics.failed_window(scrape_error or "no scrape before the window"), None
    # The server updates its counters as it hands out the last tokens; wait (up to 2 s) for
    # them to reach the client's count before taking the difference.
    give_up = clock() + 2.0
    while True:
        try:
            after = await scrape(client, metrics_url)
        except Exception as exc:
            return server_metrics.failed_window(f"{type(exc).__name__}: {exc}"), None
        window = server_metrics.window(before, after, model, output_tokens, prompt_tokens)
        if window.output_tokens_match is not False or clock() > give_up:
            return window, after
        await asyncio.sleep(0.1)


async def cell_window(
    ctx: RunContext,
    before: server_metrics.Snapshot | None,
    scrape_error: str | None,
    output_tokens: int,
    prompt_tokens: int,
) -> ServerWindow | None:
    """The server's window over a cell (from `before`, the scrape at its start), or None
    when the run scrapes no /metrics."""
    if not ctx.metrics_url:
        return None
    window, _ = await server_window(
        ctx.client,
        ctx.metrics_url,
        before,
        scrape_error,
        ctx.model,
        output_tokens,
        prompt_tokens,
        ctx.clock,
    )
    return window


def metrics_url_for(url: str, configured: str | None) -> str:
    """Where /metrics is: the configured URL, else the server's root + /metrics."""
    metrics_url = configured or f"{url.rstrip('/')}/metrics"
    if metrics_url.endswith("/v1/metrics"):
        metrics_url = metrics_url[: -len("/v1/metrics")] + "/metrics"
    return metrics_url

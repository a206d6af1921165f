"""The probes over HTTP: each sends the requests its module builds and hands the answers
to that module's judge. Nothing here decides a verdict. The engine is probed directly
(with its key) except by `doors`, which knocks at both doors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx

from deskside.errors import DesksideError
from deskside.httpclient import Limits, async_client, within
from deskside.httpclient import client as client_for
from deskside.probe import batch, context, doors, reasoning, tools
from deskside.probe.result import ProbeResult, clip, failed, skipped
from deskside.probe.target import ProbeTarget
from deskside.terminal import snippet

TIMEOUT = httpx.Timeout(120.0, connect=5.0)  # each exchange in all (httpclient.within)
LONG_TIMEOUT = httpx.Timeout(900.0, connect=5.0)  # a prefill of max_model_len tokens
START_TIMEOUT = 60.0  # for the requests beside the batched probe to produce a token
MAX_BYTES = 8 << 20  # one answer (a completion, a tokenization of max_model_len tokens)
LIMITS = Limits(total=900.0, max_bytes=MAX_BYTES)
Answered = tuple[int | None, Any, str]  # status (None: no answer), JSON body or text, error


def post(
    client: httpx.Client,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
    timeout: httpx.Timeout = TIMEOUT,
) -> Answered:
    try:
        r = client.post(
            url, json=body, headers=headers, timeout=timeout, extensions=within(timeout.read or 1)
        )
    except httpx.HTTPError as exc:
        return None, None, f"{type(exc).__name__}: {exc}"
    try:
        return r.status_code, r.json(), ""
    except (ValueError, RecursionError):
        return r.status_code, r.text, snippet(r.text)


def require_up(client: httpx.Client, target: ProbeTarget) -> None:
    """DesksideError unless the engine answers /health."""
    url = f"{target.api_url}/health"
    try:
        ok = client.get(url, timeout=5.0, extensions=within(5.0)).status_code == 200
    except httpx.HTTPError:
        ok = False
    if not ok:
        raise DesksideError(
            f"the engine of {target.recipe_name} does not answer at {url}",
            hint=f"is it up? deskside status {target.recipe_name}",
        )


def probe_doors(client: httpx.Client, target: ProbeTarget) -> ProbeResult:
    behind = target.proxy_url is not None
    results = []
    for knock in doors.knocks(target.served_names, behind):
        base = target.proxy_url if knock.door == "proxy" else target.api_url
        headers = {
            "master": target.proxy_headers,
            "engine": target.engine_headers,
            "none": {},
            "wrong": {"Authorization": f"Bearer {doors.WRONG_KEY}"},
        }[knock.key]
        status, body, error = post(
            client, f"{base}/v1/chat/completions", doors.chat_body(knock.name), headers
        )
        reply = doors.Reply(status, doors.has_completion(body), error or clip(body, 120))
        results.append((knock, reply))
    return doors.judge(results, target.served_names, behind)


def probe_tools(client: httpx.Client, target: ProbeTarget) -> ProbeResult:
    if (skip := tools.unconfigured(target.traits)) is not None:
        return skip
    url = f"{target.api_url}/v1/chat/completions"
    last: Any = None
    for choice in tools.CHOICES:
        status, body, error = post(
            client,
            url,
            tools.tool_body(target.model, choice, target.traits.reasoning_parser is not None),
            target.engine_headers,
        )
        if status is None:
            return failed(tools.NAME, error)
        if tools.refused_choice(status, body):
            last = body
            continue
        return tools.judge(choice, status, body)
    return tools.cannot_force(last)


def probe_reasoning(client: httpx.Client, target: ProbeTarget) -> ProbeResult:
    if (skip := reasoning.unconfigured(target.traits)) is not None:
        return skip
    url = f"{target.api_url}/v1/chat/completions"
    status, body, error = post(
        client, url, reasoning.chat_body(target.model), target.engine_headers
    )
    if status != 200:
        return failed(reasoning.NAME, f"without a stop string: HTTP {status} {error or clip(body)}")
    try:
        first = reasoning.read_chat(body)
    except ValueError as exc:
        return failed(reasoning.NAME, str(exc))
    picked = reasoning.pick_stop(first.reasoning)
    if picked is None:
        return reasoning.no_reasoning(first)
    stop, at = picked
    status, body, error = post(
        client, url, reasoning.chat_body(target.model, stop), target.engine_headers
    )
    if status is None:
        return failed(reasoning.NAME, error)
    return reasoning.judge(stop, at, first, status, body)


def probe_context(client: httpx.Client, target: ProbeTarget, nonce: int) -> ProbeResult:
    url = f"{target.api_url}/tokenize"
    h = target.engine_headers
    try:
        _, head, error = post(
            client, url, context.tokenize_body(target.model, f"deskside probe {nonce}:", True), h
        )
        head_ids, limit = context.read_tokenize(head)
        _, filler, _ = post(
            client, url, context.tokenize_body(target.model, context.FILLER, False), h
        )
        filler_ids, _ = context.read_tokenize(filler)
    except ValueError as exc:
        return failed(context.NAME, f"{exc} {error}".strip())
    limit = limit or target.traits.max_model_len
    if limit is None:
        return failed(
            context.NAME, "neither the engine's /tokenize nor the recipe gives max_model_len"
        )
    try:
        prompt = context.long_prompt(head_ids, filler_ids, limit - context.MAX_TOKENS)
    except ValueError as exc:
        return failed(context.NAME, str(exc))
    t0 = time.monotonic()
    status, body, error = post(
        client,
        f"{target.api_url}/v1/completions",
        context.completion_body(target.model, prompt),
        h,
        LONG_TIMEOUT,
    )
    if status is None:
        return failed(context.NAME, error)
    return context.judge(len(prompt), limit, status, body, time.monotonic() - t0)


# ----------------------------------------------------------------------- batch invariance


async def _complete(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> batch.Answer:
    r = await client.post(url, json=body)
    if r.status_code != 200:
        raise ValueError(f"HTTP {r.status_code}: {clip(r.text)}")
    try:
        return batch.read_completion(r.json())
    except RecursionError:
        raise ValueError("an answer nested too deep to be a completion") from None


async def _beside(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    started: asyncio.Event,
    stop: asyncio.Event,
) -> tuple[bool, str]:
    """Stream one request beside the probe until `stop`; (it ran until `stop`, error)."""
    async with client.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            started.set()
            return (
                False,
                f"HTTP {r.status_code}: {clip((await r.aread()).decode(errors='replace'))}",
            )
        async for line in r.aiter_lines():
            if stop.is_set():
                return True, ""
            token, end = batch.stream_chunk(line)
            if token:
                started.set()
            if end:
                return stop.is_set(), ""
    return stop.is_set(), ""


async def _batch(target: ProbeTarget, transport: httpx.AsyncBaseTransport | None) -> ProbeResult:
    n = batch.other_count(target.traits.max_num_seqs)
    if n == 0:
        return skipped(batch.NAME, "max_num_seqs 1: no request can run beside another")
    url = f"{target.api_url}/v1/completions"
    model = target.model
    probe = batch.completion_body(model, batch.PROMPT, batch.MAX_TOKENS)
    prompts = batch.other_prompts(n)
    limits = Limits(total=TIMEOUT.read or 120.0, max_bytes=MAX_BYTES)
    async with async_client(
        limits, transport, timeout=TIMEOUT, headers=target.engine_headers
    ) as client:
        alone = await _complete(client, url, probe)
        started = [asyncio.Event() for _ in prompts]
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(
                _beside(
                    client,
                    url,
                    batch.completion_body(model, p, batch.OTHER_MAX_TOKENS, True),
                    ev,
                    stop,
                )
            )
            for p, ev in zip(prompts, started, strict=True)
        ]
        try:
            try:
                await asyncio.wait_for(
                    asyncio.gather(*(ev.wait() for ev in started)), START_TIMEOUT
                )
            except TimeoutError:
                k = sum(ev.is_set() for ev in started)
                return failed(
                    batch.NAME,
                    f"only {k} of {n} requests beside the probe started within "
                    f"{START_TIMEOUT:.0f} s",
                )
            batched = await _complete(client, url, probe)
            stop.set()
            ran = await asyncio.gather(*tasks)
        finally:
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        overlap = batch.Overlap(
            others=n,
            running=sum(ok for ok, _ in ran),
            identical=prompts.count(batch.PROMPT),
            errors=[e for _, e in ran if e],
        )
        again = None
        if batch.first_difference(alone.sequence, batched.sequence) is not None:
            again = await _complete(client, url, probe)
    return batch.judge(alone, batched, overlap, again)


def probe_batch(
    target: ProbeTarget, transport: httpx.AsyncBaseTransport | None = None
) -> ProbeResult:
    try:
        return asyncio.run(_batch(target, transport))
    except (httpx.HTTPError, ValueError) as exc:
        return failed(batch.NAME, f"{type(exc).__name__}: {clip(exc)}")


# ------------------------------------------------------------------------------ all


def run_probes(
    target: ProbeTarget,
    *,
    transport: httpx.BaseTransport | None = None,
    async_transport: httpx.AsyncBaseTransport | None = None,
    say: Callable[[str], None] = lambda _: None,
    nonce: int | None = None,
) -> list[ProbeResult]:
    """Every probe, in order (a DesksideError when the engine does not answer at all)."""
    nonce = time.time_ns() if nonce is None else nonce
    results: list[ProbeResult] = []
    with client_for(LIMITS, transport, timeout=TIMEOUT) as client:
        require_up(client, target)
        say(batch.NAME)
        results.append(probe_batch(target, async_transport))
        steps: list[tuple[str, Callable[[], ProbeResult]]] = [
            (doors.NAME, lambda: probe_doors(client, target)),
            (tools.NAME, lambda: probe_tools(client, target)),
            (reasoning.NAME, lambda: probe_reasoning(client, target)),
            (context.NAME, lambda: probe_context(client, target, nonce)),
        ]
        for name, step in steps:
            say(name)
            try:
                results.append(step())
            except (httpx.HTTPError, ValueError) as exc:
                results.append(failed(name, f"{type(exc).__name__}: {clip(exc)}"))
    return results

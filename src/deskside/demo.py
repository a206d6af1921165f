"""`deskside demo`: the embedded two-node run on this machine, end to end.

Materialise the tiny DeepSeek-V3-architecture model, plan, bring up TP=2 across two local
nodes (two network namespaces joined through a bridge when run as root with ip(8),
loopback addresses otherwise) with MTP speculative decoding, send real chat completions
through every served name, compare the engine's KV line with the plan, print a small
table of TTFT, prefill, decode and aggregate throughput, and tear everything down."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from deskside import localnet, secrets
from deskside.errors import DesksideError
from deskside.home import resolve_recipe
from deskside.httpclient import Limits
from deskside.httpclient import client as bounded_client
from deskside.planner.inputs import plan_recipe
from deskside.recipe.types import Recipe
from deskside.records.names import find_run, run_lock
from deskside.runtime.local import LocalRuntime
from deskside.runtime.pipeline import UpOptions

Say = Callable[[str], None]

DEMO = Limits(total=300, max_bytes=16 << 20)  # a chat completion, streamed


def loopback_variant(recipe: Recipe) -> Recipe:
    """The same cluster on loopback addresses (127.0.0.1, 127.0.0.2, ...) without
    namespaces, for machines where deskside cannot create them."""
    nodes = []
    for i, node in enumerate(recipe.cluster.nodes):
        address = f"127.0.0.{i + 1}"
        fabric = (
            node.fabric.model_copy(update={"interface": "lo", "address": address})
            if node.fabric
            else None
        )
        nodes.append(node.model_copy(update={"netns": None, "address": address, "fabric": fabric}))
    cluster = recipe.cluster.model_copy(update={"nodes": nodes})
    engine = recipe.engine.model_copy(update={"host": "127.0.0.1"})
    return recipe.model_copy(update={"cluster": cluster, "engine": engine})


@dataclass(frozen=True)
class Sample:
    model: str
    prompt_tokens: int
    output_tokens: int
    ttft: float
    e2e: float
    start: float
    end: float


def chat(client: httpx.Client, url: str, model: str, prompt: str, max_tokens: int) -> Sample:
    """One streaming chat completion, timed with a monotonic clock; token counts from the
    server's usage (a chunk may carry several tokens under speculative decoding)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "temperature": 0,
    }
    start = time.monotonic()
    first = None
    usage: dict[str, int] = {}
    with client.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=300) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if data.get("usage"):
                usage = data["usage"]
            for choice in data.get("choices", []):
                delta = choice.get("delta", {})
                if first is None and (delta.get("content") or delta.get("reasoning_content")):
                    first = time.monotonic()
    end = time.monotonic()
    return Sample(
        model=model,
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        output_tokens=int(usage.get("completion_tokens", 0)),
        ttft=(first or end) - start,
        e2e=end - start,
        start=start,
        end=end,
    )


def measure(
    url: str,
    model: str,
    words: int,
    concurrency: int,
    max_tokens: int,
    headers: dict[str, str] | None = None,
) -> dict[str, float]:
    """A small honest cell: TTFT, per-stream decode tok/s = sum(N-1)/sum(decode time),
    aggregate tok/s = sum(N) / wall window, prefill tok/s = prompt/TTFT (c=1 only)."""
    prompts = [
        f"Request {i}: " + " ".join(f"w{i}x{j}" for j in range(words)) for i in range(concurrency)
    ]
    with (
        bounded_client(DEMO, headers=headers) as client,
        ThreadPoolExecutor(concurrency) as pool,
    ):
        samples = list(pool.map(lambda p: chat(client, url, model, p, max_tokens), prompts))
    decode = sum(s.e2e - s.ttft for s in samples)
    window = max(s.end for s in samples) - min(s.start for s in samples)
    prompt_tokens = sum(s.prompt_tokens for s in samples) / len(samples)
    ttft = sum(s.ttft for s in samples) / len(samples)
    return {
        "prompt_tokens": prompt_tokens,
        "concurrency": concurrency,
        "ttft_s": ttft,
        "prefill_tok_s": prompt_tokens / ttft if concurrency == 1 and ttft > 0 else float("nan"),
        "decode_tok_s": sum(s.output_tokens - 1 for s in samples) / decode if decode > 0 else 0.0,
        "aggregate_tok_s": sum(s.output_tokens for s in samples) / window if window > 0 else 0.0,
    }


def run_demo(say: Say, keep_up: bool = False) -> dict[str, Any]:
    recipe, path = resolve_recipe("local-tiny")
    notes = []
    if localnet.local_net(recipe) is not None:
        ok, why = localnet.can_create()
        if not ok:
            recipe = loopback_variant(recipe)
            notes.append(f"network namespaces unavailable ({why}): nodes run on loopback")
    # resolve_recipe made the embedded recipe's tiny model on first use
    say(f"tiny DeepSeek-V3 model: {recipe.model.path}")
    planned = plan_recipe(recipe, path)
    say(f"plan: {planned.kv_cache_line}")
    with run_lock(recipe.name):  # one deskside at a time on this run
        t0 = time.monotonic()
        runtime = LocalRuntime()
        # a service that is not installed here (LiteLLM, Prometheus) is left out with a note
        options = UpOptions(skip_missing_services=True, plan=planned)
        report = runtime.up(recipe, path, options, progress=say)
        if not report.ok:
            raise DesksideError(
                f"the demo cluster did not start ({report.failed_stage}): {report.error}",
                hint=report.hint,
            )
        startup = time.monotonic() - t0
        names, url = report.served_names, report.api_url
        notes += report.notes
        behind_proxy = bool(report.proxy_url)
        auth = secrets.engine_auth(recipe.name, behind_proxy) or {}
        try:
            completions = []
            for name in names:
                with bounded_client(DEMO, headers=auth) as client:
                    s = chat(client, url, name, "Say hello.", 8)
                completions.append({"model": name, "output_tokens": s.output_tokens})
                say(f"chat completion via {name!r}: {s.output_tokens} tokens")
            table = []
            for words, conc in ((64, 1), (256, 1), (64, 2)):
                say(f"measuring prompt ~{words} words x concurrency {conc}")
                table.append(measure(url, names[0], words, conc, 32, auth))
        finally:
            if not keep_up:
                say("tearing down")
                runtime.down(find_run(recipe.name))
        return {
            "notes": notes,
            "startup_seconds": round(startup, 1),
            "api_url": url,
            "proxy_url": report.proxy_url,
            "planned_kv_cache_line": report.planned_kv_cache_line,
            "logged_kv_cache_line": report.logged_kv_cache_line,
            "kv_match": report.logged_kv_cache_line == report.planned_kv_cache_line,
            "completions": completions,
            "table": table,
            "stages": [{"name": st.name, "seconds": round(st.seconds, 1)} for st in report.stages],
        }

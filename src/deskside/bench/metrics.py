"""Client-side metrics from per-request records - pure functions, as docs/bench.md defines
them.

- TTFT: request sent -> first chunk carrying a generated token (reasoning included).
- Decode time = E2E - TTFT, E2E ending at the last chunk carrying a token.
- TPOT = decode time / (N_out - 1), N_out from the server's ``usage``; per-stream decode
  tok/s = 1 / TPOT; a cell's decode tok/s = sum(N_out - 1) / sum(decode time). Never from
  chunk gaps: with speculative decoding a chunk carries several tokens.
- Prefill tok/s (apparent) = (prompt - cached) / TTFT, summed over requests; meaningful at
  concurrency 1 (above it TTFT includes waiting behind other requests).
- Aggregate tok/s = sum(N_out) / (last end - first sent) over the measured requests.
- Inter-chunk gaps are reported as such: they are not inter-token latencies.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from deskside.bench.models import CellMetrics, RequestRecord, Stats


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if not sorted_values:
        raise ValueError("no values")
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)


def stats(values: Iterable[float], over: str) -> Stats | None:
    data = sorted(values)
    if not data:
        return None
    return Stats(
        over=over,
        n=len(data),
        mean=math.fsum(data) / len(data),
        p50=percentile(data, 50),
        p90=percentile(data, 90),
        p99=percentile(data, 99),
        min=data[0],
        max=data[-1],
    )


@dataclass(frozen=True)
class RequestMetrics:
    """Derived figures of one successful request."""

    ttft_s: float
    e2e_s: float
    decode_s: float
    output_tokens: int
    tpot_s: float | None
    decode_tok_s: float | None
    prefill_tok_s: float | None
    chunks: int
    chunk_gaps_s: tuple[float, ...]


def request_metrics(r: RequestRecord) -> RequestMetrics | None:
    """None unless the request succeeded with a first token and a usage count."""
    if not r.ok or r.ttft_s is None or r.e2e_s is None or r.output_tokens is None:
        return None
    decode = r.e2e_s - r.ttft_s
    n = r.output_tokens
    tpot = decode / (n - 1) if n >= 2 and decode > 0 else None
    prefill = None
    if r.prompt_tokens is not None and r.ttft_s > 0:
        prefill = (r.prompt_tokens - (r.cached_tokens or 0)) / r.ttft_s
    offs = r.chunk_offsets_s
    gaps = tuple(b - a for a, b in pairwise(offs))
    return RequestMetrics(
        ttft_s=r.ttft_s,
        e2e_s=r.e2e_s,
        decode_s=decode,
        output_tokens=n,
        tpot_s=tpot,
        decode_tok_s=1.0 / tpot if tpot else None,
        prefill_tok_s=prefill,
        chunks=len(offs),
        chunk_gaps_s=gaps,
    )


def cell_metrics(records: Sequence[RequestRecord], concurrency: int) -> CellMetrics:
    """Aggregate the measured (non-warm-up) requests of one cell."""
    measured = [r for r in records if not r.warmup]
    ok = [(r, m) for r in measured if (m := request_metrics(r)) is not None]
    errors = Counter(r.error_kind or "error" for r in measured if not r.ok)
    n_ok = len(ok)
    out = CellMetrics(
        requests=len(measured),
        succeeded=n_ok,
        failed=len(measured) - n_ok,
        errors=dict(sorted(errors.items())),
        new_connections=sum(1 for r in measured if r.new_connection),
    )
    if measured:
        out.client_queue_s = stats((r.queued_s for r in measured), "requests")
    ends = [r.sent_s + r.end_s for r in measured if r.end_s is not None]
    if measured and ends:
        out.window_s = max(ends) - min(r.sent_s for r in measured)
    if not ok:
        return out
    out.output_tokens = sum(m.output_tokens for _, m in ok)
    out.prompt_tokens = sum(r.prompt_tokens or 0 for r, _ in ok)
    out.cached_tokens = sum(r.cached_tokens or 0 for r, _ in ok)
    out.ttft_s = stats((m.ttft_s for _, m in ok), "requests")
    out.e2e_s = stats((m.e2e_s for _, m in ok), "requests")
    out.tpot_s = stats((m.tpot_s for _, m in ok if m.tpot_s is not None), "requests")
    out.decode_tok_s_per_stream = stats(
        (m.decode_tok_s for _, m in ok if m.decode_tok_s is not None), "requests"
    )
    decoding = [m for _, m in ok if m.output_tokens >= 2 and m.decode_s > 0]
    if decoding:
        out.decode_tok_s = sum(m.output_tokens - 1 for m in decoding) / math.fsum(
            m.decode_s for m in decoding
        )
    with_prompt = [(r, m) for r, m in ok if r.prompt_tokens is not None and m.ttft_s > 0]
    if with_prompt:
        computed = sum((r.prompt_tokens or 0) - (r.cached_tokens or 0) for r, _ in with_prompt)
        out.prefill_tok_s = computed / math.fsum(m.ttft_s for _, m in with_prompt)
    out.prefill_meaningful = concurrency == 1
    if out.window_s and out.window_s > 0:
        out.aggregate_tok_s = out.output_tokens / out.window_s
        out.requests_per_s = n_ok / out.window_s
    out.chunk_gap_s = stats((g for _, m in ok for g in m.chunk_gaps_s), "inter-chunk gaps")
    chunks = sum(m.chunks for _, m in ok)
    if chunks:
        out.tokens_per_chunk = out.output_tokens / chunks
    if all(r.prompt_tokens is not None for r, _ in ok):
        out.prompt_tokens_exact = all(r.prompt_tokens == r.prompt_len for r, _ in ok)
    return out

"""CSV: one row per cell (cells.csv) and one per request (requests.csv)."""

from __future__ import annotations

import csv as _csv
from pathlib import Path
from typing import Any

from deskside.bench.metrics import request_metrics
from deskside.bench.models import BenchResult

CELL_COLUMNS = [
    "prompt_len",
    "concurrency",
    "requests",
    "succeeded",
    "failed",
    "ttft_s_p50",
    "ttft_s_mean",
    "ttft_s_p90",
    "ttft_s_p99",
    "prefill_tok_s",
    "prefill_meaningful",
    "decode_tok_s",
    "aggregate_tok_s",
    "tpot_s_p50",
    "chunk_gap_s_p50",
    "tokens_per_chunk",
    "output_tokens",
    "prompt_tokens",
    "cached_tokens",
    "window_s",
    "client_reliable",
    "client_cpu_fraction",
    "loop_lag_p99_ms",
    "server_generation_tokens",
    "server_prefix_cache_hit_rate",
    "server_preemptions",
    "server_queue_time_mean_s",
    "spec_acceptance_rate",
    "spec_mean_acceptance_length",
    "load",
    "request_rate",
    "arrivals",
    "scheduled_rate",
    "sent_rate",
    "completed_rate",
    "dropped",
    "send_lag_s_p99",
    "goodput_requests_per_s",
    "turns",
]

REQUEST_COLUMNS = [
    "prompt_len",
    "concurrency",
    "index",
    "warmup",
    "ok",
    "error_kind",
    "http_status",
    "prompt_tokens",
    "cached_tokens",
    "output_tokens",
    "sent_s",
    "ttft_s",
    "e2e_s",
    "end_s",
    "decode_s",
    "tpot_s",
    "decode_tok_s",
    "prefill_tok_s",
    "chunks",
    "queued_s",
    "new_connection",
    "response_id",
    "error",
    "scheduled_s",
    "conversation",
    "turn",
    "backend",
]


def cell_rows(result: BenchResult) -> list[dict[str, Any]]:
    rows = []
    for cell in result.cells:
        m, s, o = cell.metrics, cell.server, cell.open_loop
        spec = s.spec_decode if s else None
        rows.append(
            {
                "prompt_len": cell.prompt_len,
                "concurrency": cell.concurrency,
                "requests": m.requests,
                "succeeded": m.succeeded,
                "failed": m.failed,
                "ttft_s_p50": m.ttft_s.p50 if m.ttft_s else None,
                "ttft_s_mean": m.ttft_s.mean if m.ttft_s else None,
                "ttft_s_p90": m.ttft_s.p90 if m.ttft_s else None,
                "ttft_s_p99": m.ttft_s.p99 if m.ttft_s else None,
                "prefill_tok_s": m.prefill_tok_s,
                "prefill_meaningful": m.prefill_meaningful,
                "decode_tok_s": m.decode_tok_s,
                "aggregate_tok_s": m.aggregate_tok_s,
                "tpot_s_p50": m.tpot_s.p50 if m.tpot_s else None,
                "chunk_gap_s_p50": m.chunk_gap_s.p50 if m.chunk_gap_s else None,
                "tokens_per_chunk": m.tokens_per_chunk,
                "output_tokens": m.output_tokens,
                "prompt_tokens": m.prompt_tokens,
                "cached_tokens": m.cached_tokens,
                "window_s": m.window_s,
                "client_reliable": cell.client.reliable,
                "client_cpu_fraction": cell.client.cpu_fraction,
                "loop_lag_p99_ms": cell.client.loop_lag_p99_ms,
                "server_generation_tokens": s.generation_tokens if s else None,
                "server_prefix_cache_hit_rate": s.prefix_cache_hit_rate if s else None,
                "server_preemptions": s.preemptions if s else None,
                "server_queue_time_mean_s": s.queue_time_mean_s if s else None,
                "spec_acceptance_rate": spec.acceptance_rate if spec else None,
                "spec_mean_acceptance_length": spec.mean_acceptance_length if spec else None,
                "load": cell.label,
                "request_rate": cell.request_rate,
                "arrivals": o.arrivals if o else None,
                "scheduled_rate": o.scheduled_rate if o else None,
                "sent_rate": o.sent_rate if o else None,
                "completed_rate": o.completed_rate if o else None,
                "dropped": o.dropped if o else None,
                "send_lag_s_p99": o.send_lag_s.p99 if o and o.send_lag_s else None,
                "goodput_requests_per_s": cell.goodput.requests_per_s if cell.goodput else None,
                "turns": len(cell.turns) or None,
            }
        )
    return rows


def request_rows(result: BenchResult) -> list[dict[str, Any]]:
    rows = []
    for cell in result.cells:
        for r in cell.requests:
            m = request_metrics(r)
            rows.append(
                {
                    "prompt_len": cell.prompt_len,
                    "concurrency": cell.concurrency,
                    "index": r.index,
                    "warmup": r.warmup,
                    "ok": r.ok,
                    "error_kind": r.error_kind,
                    "http_status": r.http_status,
                    "prompt_tokens": r.prompt_tokens,
                    "cached_tokens": r.cached_tokens,
                    "output_tokens": r.output_tokens,
                    "sent_s": r.sent_s,
                    "ttft_s": r.ttft_s,
                    "e2e_s": r.e2e_s,
                    "end_s": r.end_s,
                    "decode_s": m.decode_s if m else None,
                    "tpot_s": m.tpot_s if m else None,
                    "decode_tok_s": m.decode_tok_s if m else None,
                    "prefill_tok_s": m.prefill_tok_s if m else None,
                    "chunks": len(r.chunk_offsets_s),
                    "queued_s": r.queued_s,
                    "new_connection": r.new_connection,
                    "response_id": r.response_id,
                    "error": r.error,
                    "scheduled_s": r.scheduled_s,
                    "conversation": r.conversation,
                    "turn": r.turn,
                    "backend": r.backend,
                }
            )
    return rows


def _write(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as f:
        writer = _csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return path


def write_csv(result: BenchResult, out_dir: Path) -> dict[str, Path]:
    return {
        "cells_csv": _write(out_dir / "cells.csv", CELL_COLUMNS, cell_rows(result)),
        "requests_csv": _write(out_dir / "requests.csv", REQUEST_COLUMNS, request_rows(result)),
    }

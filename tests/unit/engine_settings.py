"""EngineSettings for the planner's layer-spec tests: a vLLM 0.32 run with a bf16 KV cache
of 16-token blocks, 256 sequences, chunked prefill and prefix caching, no speculation;
the tests name what differs."""

from __future__ import annotations

from typing import Any

from deskside.planner.types import EngineSettings

SHARED: dict[str, Any] = {
    "pipeline_parallel_size": 1,
    "kv_cache_dtype": "bfloat16",
    "kv_dtype_bytes": 2,
    "block_size": 16,
    "max_num_seqs": 256,
    "gpu_memory_utilization": 0.9,
    "kv_cache_memory": None,
    "speculative": None,
    "num_draft_layers": 0,
    "enable_chunked_prefill": True,
    "enable_prefix_caching": True,
    "async_scheduling": False,
    "max_concurrent_batches": 1,
    "vllm_version": "0.32.0",
}


def engine_settings(**given: Any) -> EngineSettings:
    """SHARED and the `given` device, tensor_parallel_size, max_model_len,
    derived_max_model_len, max_num_batched_tokens (the scheduled tokens too) and
    enforce_eager."""
    return EngineSettings(
        **SHARED, **given, max_num_scheduled_tokens=given["max_num_batched_tokens"]
    )

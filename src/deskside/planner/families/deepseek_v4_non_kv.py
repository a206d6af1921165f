"""DeepSeek-V4's non-KV memory on a GPU rank: the sparse indexer's prefill workspace
(grows with max_model_len), activations and workspaces that grow with
max_num_batched_tokens (calibrated on a measured DGX Spark run), and, with vLLM >= 0.26,
sparse-attention metadata allocated outside vLLM's budget. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from deskside.planner.engine_config import is_dspark_overlay_engine
from deskside.planner.kv import cdiv, round_up
from deskside.planner.types import EngineSettings, ModelArch, NonKVEstimate
from deskside.units import GIB, MIB


@dataclass(frozen=True)
class MeasuredRun:
    """A DeepSeek-V4-Flash run whose KV memory the engine logged, used for calibration."""

    total: int  # memory the device reported
    gpu_memory_utilization: float
    available_kv: int  # "Available KV cache memory" the engine logged
    max_model_len: int
    max_num_batched_tokens: int
    tensor_parallel_size: int
    draft_layers: int  # DSpark draft layers loaded


# Measured on two DGX Spark (GB10) nodes with the DSpark overlay engine (vLLM 0.25.2), TP=2,
# DSpark with 3 draft layers, gpu_memory_utilization 0.82, max_num_batched_tokens 16,384:
# the engine reported 9.23 GiB available for the KV cache at max_model_len 1,048,576.
# Everything else vLLM's profiling counted is weights + non-KV memory; the indexer
# workspace is known per max_model_len, the rest is calibrated here. deskside's weight
# estimate from config.json (77.5 GiB per rank) is 3.8 GiB under the 81.3 GiB measured;
# that unexplained part is folded in too.
DGX_SPARK_RUN = MeasuredRun(
    total=int(121.6 * GIB),
    gpu_memory_utilization=0.82,
    available_kv=int(9.23 * GIB),
    max_model_len=1_048_576,
    max_num_batched_tokens=16_384,
    tensor_parallel_size=2,
    draft_layers=3,
)
FIXED_NON_KV = GIB  # NCCL, CUDA context, host RSS (UMA), indexer logits, FlashInfer


def indexer_workspace_bytes(max_model_len: int, dspark_overlay: bool) -> int:
    """The sparse indexer's prefill K-gather workspace, sized by max_model_len and
    counted in the profiling run: T entries of 128 fp8 + 4 scale bytes (+1 MiB), with
    T = 10 L in the DSpark overlay engine (get_max_prefill_buffer_size = 40 L / 4) and in
    vLLM 0.32 T = L x 8 x f // 4, f = 5 up to 262,144 tokens and 2 above
    (indexer.get_max_prefill_buffer_size, sparse_mla_prefill_workspace_factor)."""
    if dspark_overlay:
        entries = 10 * max_model_len
    else:
        factor = 5 if max_model_len <= 262_144 else 2
        entries = max_model_len * 8 * factor // 4
    return entries * 132 + MIB


def calibrated_rest(arch: ModelArch, run: MeasuredRun = DGX_SPARK_RUN) -> int:
    """Non-KV memory of the measured run that is neither weights nor the indexer workspace."""
    requested = -(-int(run.total * run.gpu_memory_utilization * 1000) // 1000)
    weights = arch.weight_bytes_per_rank(run.tensor_parallel_size, draft_layers=run.draft_layers)
    workspace = indexer_workspace_bytes(run.max_model_len, dspark_overlay=True)
    return requested - weights - run.available_kv - workspace


def v4_non_kv(arch: ModelArch, s: EngineSettings, max_model_len: int) -> NonKVEstimate:
    """Non-KV memory of a V4 rank on GPU: the indexer workspace (grows with
    max_model_len), and activations/workspaces that grow with max_num_batched_tokens,
    calibrated on the measured DGX Spark run; plus, outside vLLM's budget, the metadata
    buffers vLLM >= 0.26 allocates after profiling (they grow with max_model_len x
    max_num_batched_tokens and eat unified-memory headroom)."""
    overlay = is_dspark_overlay_engine(s.vllm_version)
    run = DGX_SPARK_RUN
    rest = calibrated_rest(arch, run)
    per_token = (rest - FIXED_NON_KV) / run.max_num_batched_tokens
    parts = {
        "indexer_workspace": indexer_workspace_bytes(max_model_len, overlay),
        "activations_and_workspaces": int(per_token * s.max_num_batched_tokens),
        "fixed": int(FIXED_NON_KV),
    }
    sources = [
        "DeepSeek-V4 non-KV memory: the indexer prefill workspace "
        f"({parts['indexer_workspace'] / GIB:.2f} GiB at max_model_len {max_model_len:,}) "
        "plus activations/workspaces calibrated on a measured DGX Spark run at "
        f"{run.max_model_len:,} tokens (DSpark overlay engine, vLLM 0.25.2, "
        f"TP={run.tensor_parallel_size}, {run.max_num_batched_tokens:,} batched tokens: "
        f"{run.gpu_memory_utilization} x {run.total / GIB:.1f} GiB budget - "
        f"{run.available_kv / GIB:.2f} GiB KV available - weights - that workspace), "
        "scaled by max_num_batched_tokens",
    ]
    after = 0
    if not overlay:
        mnbt = s.max_num_batched_tokens
        after = 2 * mnbt * round_up(cdiv(max_model_len, 128), 128) * 4
        after += mnbt * cdiv(max_model_len, 256) * 4
        sources.append(
            f"vLLM >= 0.26 also allocates {after / GIB:.2f} GiB of sparse-attention metadata "
            "after profiling, outside gpu_memory_utilization (counted against headroom)"
        )
    return NonKVEstimate(parts=parts, sources=tuple(sources), outside_budget=after)

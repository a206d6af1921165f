"""The engine settings vLLM would actually run with, resolved from what the user asked.

vLLM fills many settings itself (block size per backend, batch defaults per device,
chunked prefill forced off for MLA on CPU, async scheduling off on CPU...). The planner
must start from the same resolved values, so each rule here names the vLLM 0.32 code it
mirrors. What a model family decides by itself comes in as EngineDefaults. Where a
setting the user asked for ends up without effect, deskside.planner.inert says so. Pure.
"""

from __future__ import annotations

from deskside.errors import UsageError
from deskside.planner.bounds import MAX_PIPELINE_PARALLEL, MAX_TENSOR_PARALLEL
from deskside.planner.types import EngineDefaults, EngineRequest, EngineSettings, ModelArch
from deskside.units import GIB

KV_DTYPE_BYTES: dict[str, int] = {
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_ds_mla": 1,
    "nvfp4_ds_mla": 1,
}

# ds_mla layouts pack NoPE + RoPE + scales into one opaque per-token blob
# (MLAAttention.get_kv_cache_spec: state_content_bytes).
DS_MLA_STATE_BYTES: dict[str, int] = {"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}

# Speculative methods that draft with the model's own MTP layers (and cache them).
MTP_METHODS = ("mtp", "dspark", "deepseek_mtp")

# The DSpark overlay engine (Anemll's DSpark overlay on vLLM 0.25.2) is every version
# before this one; from 0.26 on, DeepSeek-V4 runs on upstream vLLM's own code.
FIRST_UPSTREAM_V4_VERSION = (0, 26)


def version_tuple(version: str) -> tuple[int, int]:
    parts = version.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 32)


# The releases whose accounting the planner models, and what changed at each (the vLLM
# function that changed it); a release outside is planned with the nearest one's rules.
VERSION_RULES: tuple[tuple[tuple[int, int], str], ...] = (
    (
        (0, 25),
        "the DSpark overlay engine (vLLM 0.25.x with Anemll's DSpark overlay): its own "
        "DeepSeek-V4 KV layout and non-KV accounting; draft slots come off the batch budget "
        "(VllmConfig._set_max_num_scheduled_tokens)",
    ),
    ((0, 26), "DeepSeek-V4 on upstream vLLM's own model code and KV cache specs"),
    (
        (0, 32),
        "draft slots are charged per request, not off the batch budget "
        "(VllmConfig._set_max_num_scheduled_tokens)",
    ),
)
OLDEST_MODELED, NEWEST_MODELED = VERSION_RULES[0][0], VERSION_RULES[-1][0]


def version_note(vllm_version: str) -> str | None:
    """What the plan must say about planning for `vllm_version`: None for a release whose
    rules the planner models."""
    t = version_tuple(vllm_version)
    span = f"{OLDEST_MODELED[0]}.{OLDEST_MODELED[1]}-{NEWEST_MODELED[0]}.{NEWEST_MODELED[1]}"
    if t < OLDEST_MODELED:
        nearest = OLDEST_MODELED
        side = "older"
    elif t > NEWEST_MODELED:
        nearest = NEWEST_MODELED
        side = "newer"
    else:
        return None
    return (
        f"vLLM {vllm_version} is {side} than the releases deskside models ({span}): planned "
        f"with {nearest[0]}.{nearest[1]}'s accounting; its KV figures may differ"
    )


def is_dspark_overlay_engine(vllm_version: str) -> bool:
    """The DSpark overlay engine: vLLM 0.25.x with Anemll's DSpark overlay, whose
    DeepSeek-V4 KV layout and accounting differ from upstream vLLM's."""
    return version_tuple(vllm_version) < FIRST_UPSTREAM_V4_VERSION


def _block_size(defaults: EngineDefaults, req: EngineRequest) -> int:
    """CpuPlatform.check_and_update_config: the reference CPU MLA kernel (no AMX tiles)
    needs 16, DeepSeek-V4 needs 256, others (AMX_MLA included) take the user's or 128. On
    GPU the CacheConfig default is 16; FlashMLA (MLA on Hopper/Blackwell) prefers 64 and
    DeepSeek-V4's sparse backends only run 256."""
    if req.device == "cpu":
        forced = defaults.cpu_amx_block_size if req.cpu_amx else defaults.cpu_block_size
        if forced is not None:
            return forced
        return req.block_size or 128
    if req.block_size is None:
        return defaults.gpu_block_size
    if defaults.gpu_block_sizes is not None and req.block_size not in defaults.gpu_block_sizes:
        sizes = ", ".join(str(b) for b in defaults.gpu_block_sizes)
        raise UsageError(
            f"engine.block_size {req.block_size}: this model's attention backends run block "
            f"size {sizes} only",
            hint=f"set engine.block_size: {defaults.gpu_block_sizes[0]}, or leave it unset",
        )
    return req.block_size


def _batch_defaults(req: EngineRequest, world_size: int) -> tuple[int, int]:
    """EngineArgs.get_batch_defaults for the OpenAI API server."""
    if req.device == "cpu":
        return 2048 * world_size, 128 * world_size
    if req.device_total_bytes >= 160 * GIB:
        return 16384, 1024
    if req.device_total_bytes >= 70 * GIB:
        return 8192, 1024
    return 2048, 256


def resolve(arch: ModelArch, req: EngineRequest, defaults: EngineDefaults) -> EngineSettings:
    """EngineSettings vLLM would resolve from `req` for `arch`."""
    tp, pp = req.tensor_parallel_size, req.pipeline_parallel_size
    if tp < 1 or pp < 1:
        raise UsageError("tensor and pipeline parallel sizes must be at least 1")
    if tp > MAX_TENSOR_PARALLEL or pp > MAX_PIPELINE_PARALLEL:
        raise UsageError(
            f"tensor parallel size {tp} x pipeline parallel size {pp} is beyond what deskside "
            f"plans (at most {MAX_TENSOR_PARALLEL} x {MAX_PIPELINE_PARALLEL})"
        )
    # ModelConfig.verify_with_parallel_config: attention heads split evenly over TP ranks
    if arch.num_attention_heads % tp:
        raise UsageError(
            f"Total number of attention heads ({arch.num_attention_heads}) must be divisible "
            f"by tensor parallel size ({tp}).",
            hint="choose a tensor parallel size that divides the model's num_attention_heads",
        )
    # ModelConfig._verify_with_expert_parallelism
    if req.enable_expert_parallel and arch.moe is None:
        raise UsageError(
            "Number of experts in the model must be greater than 0 when expert parallelism "
            "is enabled.",
            hint="this model has no experts (it is not MoE): set "
            "engine.enable_expert_parallel: false",
        )
    block_size = _block_size(defaults, req)
    kv_dtype = req.kv_cache_dtype
    if kv_dtype == "auto":
        kv_dtype = arch.dtype
        kv_bytes = arch.dtype_bytes
    elif kv_dtype in KV_DTYPE_BYTES:
        kv_bytes = KV_DTYPE_BYTES[kv_dtype]
    else:
        raise UsageError(
            f"unknown kv_cache_dtype {kv_dtype!r}",
            hint="use auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_ds_mla or nvfp4_ds_mla",
        )
    if kv_dtype in DS_MLA_STATE_BYTES and not arch.use_mla:
        raise UsageError(
            f"kv_cache_dtype {kv_dtype} is only for DeepSeek MLA models",
            hint="use fp8 or auto for this model",
        )

    # SchedulerConfig / CacheConfig defaults: chunked prefill and prefix caching on.
    chunked = req.enable_chunked_prefill is not False
    prefix = req.enable_prefix_caching is not False
    async_scheduling = req.async_scheduling
    default_tokens, default_seqs = _batch_defaults(req, tp * pp)
    batched = req.max_num_batched_tokens or default_tokens
    if req.device == "cpu":
        # CpuPlatform.check_and_update_config: async scheduling is off on CPU...
        async_scheduling = False
        if defaults.cpu_mla and not req.cpu_amx:
            # ...and MLA without AMX forces chunked prefill and prefix caching off, and
            # max_num_batched_tokens up to max(max_model_len, 2048).
            chunked = prefix = False
            batched = max(req.max_model_len or arch.max_position_embeddings, 2048)
    elif req.max_num_batched_tokens is None and not chunked and req.max_model_len:
        # EngineArgs._set_default_max_num_seqs_and_batched_tokens_args
        batched = max(req.max_model_len, batched)
    seqs = req.max_num_seqs or default_seqs

    spec = req.speculative
    draft_layers = 0
    if spec is not None and spec.method in MTP_METHODS:
        if arch.num_mtp_layers == 0:
            raise UsageError(
                f"speculative method {spec.method!r} needs MTP layers, and this model's "
                "config has none (num_nextn_predict_layers is 0)",
                hint="use another method (e.g. ngram) or a checkpoint with MTP layers",
            )
        # DeepSeekMultiTokenPredictor.__init__ builds every num_nextn_predict_layers
        # module (each caches KV); they are reused cyclically for more draft tokens.
        draft_layers = arch.num_mtp_layers

    # VllmConfig.max_concurrent_batches: PP needs pp batches, async scheduling 2 (pp=1).
    concurrent = pp
    if async_scheduling and pp <= 1:
        concurrent = 2

    # VllmConfig._set_max_num_scheduled_tokens: vLLM 0.32 charges draft slots per
    # request; before 0.32 (the DSpark overlay engine, vLLM 0.25.2, included) they came
    # off the batch budget (max_num_seqs x slots per request; DSpark needs K - 1 per
    # request).
    scheduled = batched
    if spec is not None and version_tuple(req.vllm_version) < (0, 32):
        per_request = spec.num_speculative_tokens - 1 if spec.method == "dspark" else 0
        scheduled = batched - seqs * per_request

    util = req.gpu_memory_utilization if req.gpu_memory_utilization is not None else 0.9
    return EngineSettings(
        device=req.device,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        kv_cache_dtype=kv_dtype,
        kv_dtype_bytes=kv_bytes,
        block_size=block_size,
        max_model_len=req.max_model_len,
        derived_max_model_len=arch.max_position_embeddings,
        max_num_batched_tokens=batched,
        max_num_seqs=seqs,
        max_num_scheduled_tokens=scheduled,
        gpu_memory_utilization=util,
        kv_cache_memory=req.kv_cache_memory,
        speculative=spec,
        num_draft_layers=draft_layers,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=prefix,
        async_scheduling=async_scheduling,
        enforce_eager=req.enforce_eager,
        max_concurrent_batches=concurrent,
        vllm_version=req.vllm_version,
        data_parallel_size=req.data_parallel_size,
        enable_expert_parallel=req.enable_expert_parallel,
    )

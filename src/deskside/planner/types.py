"""The planner's vocabulary: what a model caches and weighs (ModelArch and its parts), what
the user asked of the engine (EngineRequest) and what vLLM resolves from it
(EngineSettings), and the non-KV memory estimate. Pure data; every other planner module
builds on these, and this module imports nothing of the planner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from deskside.errors import ModelConfigError

# "gdn" and "mamba2": layers that keep a recurrent state per request instead of a KV cache;
# "chunked": chunked local attention (Llama 4)
AttentionKind = Literal["full", "sliding", "mla", "v4", "chunked", "gdn", "mamba2"]

# Bytes per element of the dtypes config.json names (torch_dtype / dtype).
DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "float8_e4m3fn": 1,
}

# Bytes per parameter of a weight format, scales included:
# fp8 with 128x128 block scales (one fp32 scale per 16,384 weights), NVFP4 (e2m1 + one
# fp8 scale per 16 weights), MXFP4 (e2m1 + one e8m0 scale per 32 weights).
WEIGHT_FORMAT_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0 + 4.0 / (128 * 128),
    "nvfp4": 0.5 + 1.0 / 16,
    "mxfp4": 0.5 + 1.0 / 32,
}


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class AttentionLayer:
    """What one attention layer keeps in the KV cache (before tensor parallelism)."""

    index: int  # position in the model; draft layers continue after the target's
    kind: AttentionKind
    num_kv_heads: int  # KV heads of the whole layer (1 for MLA: one latent vector)
    head_size: int  # K (or MLA latent) size per head
    head_size_v: int  # V size per head (0 for MLA: no separate V)
    sliding_window: int | None = None
    compress_ratio: int = 0  # DeepSeek-V4: tokens per compressed state (0 = window only)
    index_head_dim: int | None = None  # DeepSeek-V3.2/V4 sparse indexer key size
    is_draft: bool = False  # an MTP draft layer (only cached when speculation uses it)
    attention_chunk_size: int | None = None  # chunked local attention (Llama 4)


@dataclass(frozen=True)
class RecurrentState:
    """What one recurrent layer of a hybrid model keeps per request (before tensor
    parallelism): a short convolution state and a recurrent (SSM) state.

    Gated delta net (Qwen3-Next, Qwen3.5): key/value heads and head sizes.
    Mamba2 (Nemotron-H): `num_v_heads` Mamba heads of `head_v_dim`, `num_k_heads` groups
    of `head_k_dim` (ssm_state_size)."""

    kind: Literal["gdn", "mamba2"]
    num_k_heads: int  # GDN key heads / Mamba2 n_groups
    num_v_heads: int  # GDN value heads / Mamba2 heads
    head_k_dim: int  # GDN key head size / Mamba2 ssm_state_size
    head_v_dim: int  # GDN value head size / Mamba2 head_dim
    conv_kernel: int
    ssm_cache_dtype: str = "auto"  # the SSM state dtype the model's config asks for


@dataclass(frozen=True)
class MoEShape:
    num_experts: int
    num_shared_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    num_moe_layers: int


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts by where they live; they decide bytes per format and per rank."""

    embedding: int  # input embeddings (vocab-parallel)
    lm_head: int  # output projection (0 when tied to the embeddings)
    attention: int  # attention projections of all target layers (tensor-parallel)
    dense_mlp: int  # dense MLPs (tensor-parallel)
    experts: int  # routed experts (sharded across TP ranks)
    shared_experts: int  # shared experts (tensor-parallel)
    router: int  # MoE gates (replicated)
    norms: int  # norms and small vectors (replicated)
    draft_layer: int = 0  # one MTP/DSpark draft layer, non-expert part
    draft_layer_experts: int = 0  # one draft layer's routed experts
    vision: int = 0  # a multimodal model's vision tower and projector (on every PP stage)

    @property
    def total(self) -> int:
        """The model's own parameters, draft layers excluded."""
        return (
            self.embedding
            + self.lm_head
            + self.attention
            + self.dense_mlp
            + self.experts
            + self.shared_experts
            + self.router
            + self.norms
            + self.vision
        )


@dataclass(frozen=True)
class ModelArch:
    """The parts of a model the planner needs."""

    architecture: str
    model_type: str
    family: str  # llama | qwen2 | qwen3 | mistral | gemma2 | gemma3 | deepseek_v2 | ...
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    vocab_size: int
    max_position_embeddings: int  # the derived length limit (RoPE scaling applied)
    dtype: str  # the checkpoint's dtype ("bfloat16"...): KV dtype when kv_cache_dtype=auto
    layers: tuple[AttentionLayer, ...]  # target layers then draft layers
    params: ParamCounts
    active_params: int  # parameters used per token (MoE: only the routed experts chosen)
    weights_format: str  # bf16 | fp16 | fp8 | nvfp4 | mxfp4 | fp8+mxfp4 | bf16+mxfp4
    moe: MoEShape | None = None
    num_mtp_layers: int = 0  # num_nextn_predict_layers
    use_mla: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    recurrent: RecurrentState | None = None  # hybrid models: the recurrent layers' state

    @property
    def target_layers(self) -> tuple[AttentionLayer, ...]:
        return tuple(layer for layer in self.layers if not layer.is_draft)

    @property
    def draft_layers(self) -> tuple[AttentionLayer, ...]:
        return tuple(layer for layer in self.layers if layer.is_draft)

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)

    def weight_bytes(self, weights_format: str | None = None, draft_layers: int = 0) -> int:
        """Bytes of all weights in `weights_format` (default: the checkpoint's), with
        `draft_layers` MTP/DSpark draft layers loaded."""
        return sum(weight_bytes_by_part(self, weights_format, draft_layers).values())

    def weight_bytes_per_rank(
        self, tp: int, weights_format: str | None = None, draft_layers: int = 0
    ) -> int:
        """Bytes one tensor-parallel rank holds: sharded parts / tp, replicated parts whole."""
        parts = weight_bytes_by_part(self, weights_format, draft_layers)
        replicated = parts["router"] + parts["norms"]
        sharded = sum(parts.values()) - replicated
        return -(-sharded // tp) + replicated


def weight_bytes_by_part(
    arch: ModelArch, weights_format: str | None = None, draft_layers: int = 0
) -> dict[str, int]:
    """Bytes of each part of the model. Embeddings, norms and routers stay in the
    checkpoint dtype; linear layers take the format; in `fp8+mxfp4` the routed experts are
    MXFP4 and the other linear layers FP8 (DeepSeek-V4's checkpoint layout)."""
    fmt = weights_format or arch.weights_format
    dense_fmt, _, expert_fmt = fmt.partition("+")
    expert_fmt = expert_fmt or dense_fmt
    for name in (dense_fmt, expert_fmt):
        if name not in WEIGHT_FORMAT_BYTES:
            raise ModelConfigError(
                f"unknown weights format {name!r}",
                hint=f"use one of {', '.join(WEIGHT_FORMAT_BYTES)} or fp8+mxfp4",
            )
    base = float(arch.dtype_bytes)
    dense = WEIGHT_FORMAT_BYTES[dense_fmt]
    expert = WEIGHT_FORMAT_BYTES[expert_fmt]
    p = arch.params
    return {
        "embedding": int(p.embedding * base),
        "lm_head": int(p.lm_head * base),
        "attention": int(p.attention * dense),
        "dense_mlp": int(p.dense_mlp * dense),
        "experts": int(p.experts * expert),
        "shared_experts": int(p.shared_experts * dense),
        "router": int(p.router * base),
        "norms": int(p.norms * base),
        "draft": int(draft_layers * (p.draft_layer * dense + p.draft_layer_experts * expert)),
        "vision": int(p.vision * base),
    }


# --------------------------------------------------------------------------- the engine


@dataclass(frozen=True)
class Speculative:
    method: str
    num_speculative_tokens: int


@dataclass(frozen=True)
class EngineRequest:
    """What the user asked for (None = let vLLM decide)."""

    device: str = "gpu"  # gpu | cpu
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    kv_cache_dtype: str = "auto"
    block_size: int | None = None
    max_model_len: int | None = None  # None = "auto"
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory: int | None = None
    speculative: Speculative | None = None
    enable_chunked_prefill: bool | None = None  # None = vLLM's default (on)
    enable_prefix_caching: bool | None = None  # None = vLLM's default (on)
    async_scheduling: bool = False
    enforce_eager: bool = False
    vllm_version: str = "0.32.0"
    data_parallel_size: int = 1  # engines (DP ranks), each with TP x PP GPUs
    enable_expert_parallel: bool = False
    device_total_bytes: int = 0  # the device's reported total memory (batch defaults)
    cpu_amx: bool = False  # device cpu: an x86 CPU with AMX tiles (vLLM's AMX kernels)
    env: Mapping[str, str] = field(default_factory=dict)  # the engine's environment

    @property
    def allow_long_max_model_len(self) -> bool:
        """VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (or true): vLLM accepts a max_model_len over the
        model's limit (_get_and_verify_max_len; envs.py parses "1"/"true", any case)."""
        value = self.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0")
        return value.strip().lower() in ("1", "true")


@dataclass(frozen=True)
class EngineDefaults:
    """What vLLM decides for a model family by itself (CpuPlatform.check_and_update_config
    and the attention backends' block sizes)."""

    gpu_block_size: int  # block size on GPU when the user sets none
    cpu_block_size: int | None  # block size CPUs without AMX force (None: user's, or 128)
    cpu_amx_block_size: int | None  # block size x86 CPUs with AMX tiles force (likewise)
    cpu_mla: bool  # the MLA path: without AMX, chunked prefill and prefix caching go off
    gpu_block_sizes: tuple[int, ...] | None = None  # the only sizes its GPU backends run


@dataclass(frozen=True)
class EngineSettings:
    """The settings vLLM resolves and runs with."""

    device: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    kv_cache_dtype: str  # resolved ("auto" -> the model dtype name)
    kv_dtype_bytes: int
    block_size: int
    max_model_len: int | None  # None = auto-fit
    derived_max_model_len: int  # the model's own limit
    max_num_batched_tokens: int
    max_num_seqs: int
    max_num_scheduled_tokens: int
    gpu_memory_utilization: float
    kv_cache_memory: int | None
    speculative: Speculative | None
    num_draft_layers: int  # draft layers whose KV is cached (MTP)
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    async_scheduling: bool
    enforce_eager: bool
    max_concurrent_batches: int
    vllm_version: str
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False

    @property
    def max_in_flight_tokens(self) -> int:
        # VllmConfig.max_in_flight_tokens
        return self.max_concurrent_batches * self.max_num_batched_tokens

    @property
    def num_prefill_lookahead_tokens(self) -> int:
        # VllmConfig.num_prefill_lookahead_tokens: MTP chains with several modules read
        # num_speculative_tokens ahead; single-module drafters one token.
        spec = self.speculative
        # SpeculativeConfig.use_eagle / use_multi_module_mtp
        if spec is None or spec.method not in ("eagle", "eagle3", "mtp", "dflash", "dspark"):
            return 0
        if spec.method == "mtp" and min(self.num_draft_layers, spec.num_speculative_tokens) > 1:
            return spec.num_speculative_tokens
        return 1


# --------------------------------------------------------------------------- non-KV memory


@dataclass(frozen=True)
class NonKVEstimate:
    """Non-KV memory of a GPU rank: what vLLM's profiling run measures besides the weights
    (vllm/utils/mem_utils.py: memory_profiling), estimated before start-up; `sources` say
    where each term comes from and go into the plan's assumptions."""

    parts: dict[str, int] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    outside_budget: int = 0  # allocated after vLLM fixes its budget (eats headroom)

    @property
    def total(self) -> int:
        return sum(self.parts.values())

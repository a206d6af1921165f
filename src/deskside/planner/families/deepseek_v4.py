"""The DeepSeek-V4 family: its config reader and the family object the registry hands
the planner (caches and accounting in deepseek_v4_cache, non-KV memory in
deepseek_v4_non_kv)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskside.planner.bounds import (
    MAX_DRAFT_LAYERS,
    MAX_EXPERTS,
    MAX_GROUPS,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_INTERMEDIATE,
    MAX_POSITIONS,
    MAX_RANK,
    MAX_SHARED_EXPERTS,
)
from deskside.planner.families.config_values import (
    ConfigValueError,
    entry_in,
    flag,
    integer,
    items,
    mapping,
    text,
)
from deskside.planner.families.deepseek_v4_cache import (
    num_draft_layers,
    v4_accounting,
    v4_layer_specs,
)
from deskside.planner.families.deepseek_v4_non_kv import v4_non_kv
from deskside.planner.families.hf_config import common_fields
from deskside.planner.kv import Accounting, KVSpec
from deskside.planner.types import (
    AttentionLayer,
    EngineDefaults,
    EngineSettings,
    ModelArch,
    MoEShape,
    NonKVEstimate,
    ParamCounts,
)

DEFAULT_DSPARK_LAYERS = 3  # DSparkDeepseekV4Model: n_mtp_layers or 3
COMPRESS_RATIOS = (0, 4, 128)


def read_deepseek_v4(cfg: Mapping[str, Any]) -> ModelArch:
    c = common_fields(cfg)
    hidden, n_layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    head_dim = integer(cfg, "head_dim", 1, MAX_HEAD_DIM)
    window = integer(cfg, "sliding_window", 1, MAX_POSITIONS)
    ratios_raw = items(cfg, "compress_ratios", n_layers, "one per layer: num_hidden_layers")
    if ratios_raw is None:
        raise ConfigValueError(
            "compress_ratios",
            "is missing",
            hint=f"DeepSeek-V4 needs a list of at least num_hidden_layers ({n_layers}) entries",
        )
    # DeepseekV4Attention: a layer compresses by 4 (with an indexer), by 128, or not (0)
    ratios = [
        int(entry_in("compress_ratios", i, r, COMPRESS_RATIOS))
        for i, r in enumerate(ratios_raw[:n_layers])
    ]
    index_head_dim = integer(cfg, "index_head_dim", 1, MAX_HEAD_DIM)
    index_heads = integer(cfg, "index_n_heads", 1, MAX_HEADS)
    q_lora = integer(cfg, "q_lora_rank", 1, MAX_RANK)
    o_lora = integer(cfg, "o_lora_rank", 1, MAX_RANK)
    o_groups = integer(cfg, "o_groups", 0, MAX_GROUPS, 0) or 8
    n_mtp = integer(cfg, "num_nextn_predict_layers", 0, MAX_DRAFT_LAYERS, 0)
    n_dspark = integer(cfg, "n_mtp_layers", 0, MAX_DRAFT_LAYERS, 0) or DEFAULT_DSPARK_LAYERS

    layers = tuple(
        AttentionLayer(
            index=i,
            kind="v4",
            num_kv_heads=1,
            head_size=head_dim,
            head_size_v=0,
            sliding_window=window,
            compress_ratio=max(ratio, 0),
            index_head_dim=index_head_dim if ratio == 4 else None,
        )
        for i, ratio in enumerate(ratios)
    )
    # Draft layers: as many as the larger drafter (DSpark's n_mtp_layers or 3, MTP's
    # num_nextn_predict_layers); the spec builder keeps as many as the method uses.
    drafts = tuple(
        AttentionLayer(
            index=n_layers + j,
            kind="v4",
            num_kv_heads=1,
            head_size=head_dim,
            head_size_v=0,
            sliding_window=window,
            is_draft=True,
        )
        for j in range(max(n_mtp, n_dspark))
    )

    # Parameters (DeepseekV4Attention / DeepseekV4MoE shapes).
    attn_one = (
        hidden * q_lora  # wq_a
        + q_lora * heads * head_dim  # wq_b
        + hidden * head_dim  # wkv (one latent head)
        + (heads * head_dim // o_groups) * o_groups * o_lora  # wo_a (grouped)
        + o_groups * o_lora * hidden  # wo_b
        + heads  # attention sinks
    )
    compressor = {4: 2 * 2 * hidden * head_dim, 128: 2 * hidden * head_dim, 0: 0}
    indexer = (
        q_lora * index_heads * index_head_dim
        + hidden * index_heads
        + 2 * 2 * hidden * index_head_dim
    )
    attention = sum(attn_one + compressor.get(r, 0) + (indexer if r == 4 else 0) for r in ratios)
    n_experts = integer(cfg, "n_routed_experts", 1, MAX_EXPERTS)
    n_shared = integer(cfg, "n_shared_experts", 0, MAX_SHARED_EXPERTS, 0)
    topk = integer(cfg, "num_experts_per_tok", 1, n_experts, note="n_routed_experts")
    e_inter = integer(cfg, "moe_intermediate_size", 1, MAX_INTERMEDIATE)
    expert_one = 3 * hidden * e_inter
    hc = integer(cfg, "hc_mult", 0, MAX_GROUPS, 0) or 1
    embed = c["vocab_size"] * hidden
    draft_dense = attn_one + n_shared * expert_one + hidden * n_experts
    draft_dense += 2 * hidden * hidden + 4 * hidden
    params = ParamCounts(
        embedding=embed,
        lm_head=0 if flag(cfg, "tie_word_embeddings", False) else embed,
        attention=attention,
        dense_mlp=0,
        experts=n_layers * n_experts * expert_one,
        shared_experts=n_layers * n_shared * expert_one,
        router=n_layers * hidden * n_experts,
        norms=n_layers * (2 * hidden + q_lora + head_dim) * hc,
        draft_layer=draft_dense,
        draft_layer_experts=n_experts * expert_one,
    )
    active = params.total - params.experts + n_layers * topk * expert_one
    expert_dtype = str(text(cfg, "expert_dtype", "fp4", name=True)).lower()
    fmt = "fp8+mxfp4" if expert_dtype in ("fp4", "mxfp4") else "fp8"
    if mapping(cfg, "quantization_config") is None:
        fmt = "bf16"
    return ModelArch(
        family="deepseek_v4",
        layers=layers + drafts,
        params=params,
        active_params=active,
        weights_format=fmt,
        moe=MoEShape(n_experts, n_shared, topk, e_inter, n_layers),
        num_mtp_layers=n_mtp,
        use_mla=True,
        notes=(
            f"{sum(r == 0 for r in ratios)} window-only layers, {sum(r == 4 for r in ratios)} "
            f"ratio-4 layers with a sparse indexer, {sum(r == 128 for r in ratios)} ratio-128 "
            f"layers; sliding window {window} on every layer",
        ),
        **c,
    )


class DeepseekV4Family:
    """DeepSeek-V4: compressed MLA, sliding windows and compressor states per layer, on
    upstream vLLM (>= 0.26) or on the DSpark overlay engine (vLLM 0.25.2)."""

    name = "deepseek_v4"
    model_types: Mapping[str, str] = {"deepseek_v4": "deepseek_v4"}

    def read(self, cfg: Mapping[str, Any]) -> ModelArch:
        return read_deepseek_v4(cfg)

    def engine_defaults(self, arch: ModelArch) -> EngineDefaults:
        # DeepseekV4SparseMLABackend / DeepseekV4IndexerBackend only run block_size 256 (the
        # CPU backend forces it: CpuPlatform.check_and_update_config); its AMX CPU kernels
        # keep chunked prefill and prefix caching (without AMX they go off, as for any MLA
        # model on CPU).
        return EngineDefaults(
            gpu_block_size=256,
            cpu_block_size=256,
            cpu_amx_block_size=256,
            cpu_mla=True,
            gpu_block_sizes=(256,),
        )

    def layer_specs(self, arch: ModelArch, settings: EngineSettings) -> dict[str, KVSpec]:
        return v4_layer_specs(arch, settings)

    def accounting(self, specs: dict[str, KVSpec], settings: EngineSettings) -> Accounting:
        return v4_accounting(specs, settings)

    def draft_layers_loaded(self, arch: ModelArch, settings: EngineSettings) -> int:
        return num_draft_layers(arch, settings)

    def non_kv(
        self, arch: ModelArch, settings: EngineSettings, max_model_len: int
    ) -> NonKVEstimate:
        return v4_non_kv(arch, settings, max_model_len)

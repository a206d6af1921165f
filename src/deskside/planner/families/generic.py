"""The generic Hugging Face family: Llama, Mistral, Qwen2/3 (dense and MoE), Gemma2/3 with
grouped-query attention, DeepSeek V2/V3/V3.2 (and Kimi K2) with MLA, gpt-oss, GLM-4.5 MoE,
Llama 4 with chunked local attention, and any other attention model whose config has the
fields vLLM's attention layers read (reader_choice). vLLM sizes and groups their caches
with its generic rules (deskside.planner.kv).

The readers follow what vLLM does with the same config (which layers slide, how MLA heads
are sized, how many draft layers MTP adds), citing the vLLM or transformers code they
mirror.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from deskside.planner.bounds import (
    MAX_DRAFT_LAYERS,
    MAX_EXPERTS,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_INDEX,
    MAX_INTERMEDIATE,
    MAX_LAYERS,
    MAX_POSITIONS,
    MAX_RANK,
    MAX_SHARED_EXPERTS,
)
from deskside.planner.families.attention_fields import head_shape
from deskside.planner.families.by_fields import read_by_fields
from deskside.planner.families.config_values import (
    ConfigValueError,
    flag,
    integer,
    items,
    text,
)
from deskside.planner.families.generic_cache import generic_layer_specs
from deskside.planner.families.glm4_moe import read_glm4_moe
from deskside.planner.families.gpt_oss import read_gpt_oss
from deskside.planner.families.hf_config import common_fields, weights_format
from deskside.planner.families.llama4 import read_llama4
from deskside.planner.families.reader_choice import BY_FIELDS, MLA_MODEL_TYPES, Choice, choose
from deskside.planner.kv import Accounting, KVSpec, generic_accounting
from deskside.planner.types import (
    AttentionLayer,
    EngineDefaults,
    EngineSettings,
    ModelArch,
    MoEShape,
    NonKVEstimate,
    ParamCounts,
)
from deskside.units import MIB

# config.json model_type -> ModelArch.family
MODEL_TYPES: dict[str, str] = {
    "llama": "llama",
    "mistral": "mistral",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen2_moe": "qwen2_moe",
    "qwen3_moe": "qwen3_moe",
    "gemma2": "gemma2",
    "gemma3": "gemma3",
    "gemma3_text": "gemma3",
    "deepseek_v2": "deepseek_v2",
    "deepseek_v3": "deepseek_v3",
    "deepseek_v32": "deepseek_v32",
}
MLA_FAMILIES = ("deepseek_v2", "deepseek_v3", "deepseek_v32")
# model types with a reader of their own beyond MODEL_TYPES (other model types are read
# by their architectures, see reader_choice)
NAMED_TYPES: dict[str, str] = {
    "gpt_oss": "gpt_oss",
    "glm4_moe": "glm4_moe",
    "llama4": "llama4",
    "llama4_text": "llama4",
}
LISTED_TYPES: dict[str, str] = {**MODEL_TYPES, **NAMED_TYPES}


def layer_types(cfg: Mapping[str, Any], family: str, n_layers: int) -> list[str]:
    """Which layers slide, as transformers fills `layer_types` when config.json lacks it
    (Gemma2Config/Gemma3Config/Qwen2Config/Qwen3Config.__post_init__), and as vLLM then
    applies it (EngineArgs.create_engine_config: the model-level window only when every
    layer slides or no layer_types exist)."""
    given = items(cfg, "layer_types", 0, "one per layer")
    if given is not None and len(given) >= n_layers:
        return [
            str(text({f"layer_types[{i}]": t}, f"layer_types[{i}]", "", name=True))
            for i, t in enumerate(given[:n_layers])
        ]
    window = cfg.get("sliding_window")
    if family == "gemma3":
        pattern = integer(cfg, "sliding_window_pattern", 1, MAX_LAYERS, 6)
        return [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)
        ]
    if family == "gemma2":
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers)]
    if family in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        use = flag(cfg, "use_sliding_window", False) and window is not None
        first = integer(cfg, "max_window_layers", 0, MAX_INDEX, n_layers)
        return [
            "sliding_attention" if use and i >= first else "full_attention" for i in range(n_layers)
        ]
    # Llama, Mistral and others: one model-level window applies to every layer.
    kind = "sliding_attention" if window else "full_attention"
    return [kind] * n_layers


def read_gqa(cfg: Mapping[str, Any], family: str) -> ModelArch:
    """Grouped-query attention models: K and V per KV head, full or sliding per layer."""
    c = common_fields(cfg)
    hidden, n_layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv_heads, head_dim = head_shape(cfg, hidden, heads)
    window = integer(cfg, "sliding_window", 0, MAX_POSITIONS, None) or None
    types = layer_types(cfg, family, n_layers)
    layers = tuple(
        AttentionLayer(
            index=i,
            kind="sliding" if t == "sliding_attention" and window else "full",
            num_kv_heads=kv_heads,
            head_size=head_dim,
            head_size_v=head_dim,
            sliding_window=window if t == "sliding_attention" and window else None,
        )
        for i, t in enumerate(types)
    )
    inter = integer(cfg, "intermediate_size", 1, MAX_INTERMEDIATE, 4 * hidden)
    attn = n_layers * (hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2)
    moe: MoEShape | None = None
    experts = shared = router = 0
    dense_mlp = n_layers * 3 * hidden * inter
    active_experts = 0
    n_experts = integer(cfg, "num_experts", 0, MAX_EXPERTS, 0)
    if n_experts:
        e_inter = integer(cfg, "moe_intermediate_size", 1, MAX_INTERMEDIATE, inter)
        topk = integer(cfg, "num_experts_per_tok", 1, n_experts, 1, note="num_experts")
        shared_inter = integer(cfg, "shared_expert_intermediate_size", 0, MAX_INTERMEDIATE, 0)
        moe = MoEShape(n_experts, 1 if shared_inter else 0, topk, e_inter, n_layers)
        experts = n_layers * n_experts * 3 * hidden * e_inter
        shared = n_layers * 3 * hidden * shared_inter
        router = n_layers * hidden * n_experts
        dense_mlp = 0
        active_experts = n_layers * topk * 3 * hidden * e_inter
    tied = flag(cfg, "tie_word_embeddings", family in ("gemma2", "gemma3"))
    embed = c["vocab_size"] * hidden
    params = ParamCounts(
        embedding=embed,
        lm_head=0 if tied else embed,
        attention=attn,
        dense_mlp=dense_mlp,
        experts=experts,
        shared_experts=shared,
        router=router,
        norms=(2 * n_layers + 1) * hidden,
    )
    active = params.total - experts + active_experts
    return ModelArch(
        family=family,
        layers=layers,
        params=params,
        active_params=active,
        weights_format=weights_format(cfg, c["dtype"]),
        moe=moe,
        **c,
    )


def read_deepseek_mla(cfg: Mapping[str, Any], family: str) -> ModelArch:
    """DeepSeek V2/V3/V3.2: MLA caches one latent of kv_lora_rank + qk_rope_head_dim per
    token and layer (MLAAttention.get_kv_cache_spec: num_kv_heads=1, replicated on every TP
    rank); V3.2 adds an indexer key cache (DeepseekV32IndexerCache.get_kv_cache_spec);
    num_nextn_predict_layers MTP layers follow the target layers."""
    c = common_fields(cfg)
    hidden, n_layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv_lora = integer(cfg, "kv_lora_rank", 1, MAX_RANK)
    rope = integer(cfg, "qk_rope_head_dim", 1, MAX_HEAD_DIM)
    nope = integer(cfg, "qk_nope_head_dim", 0, MAX_HEAD_DIM)
    v_head = integer(cfg, "v_head_dim", 1, MAX_HEAD_DIM)
    q_lora = integer(cfg, "q_lora_rank", 1, MAX_RANK, None)
    index_head_dim = (
        integer(cfg, "index_head_dim", 1, MAX_HEAD_DIM, None) if family == "deepseek_v32" else None
    )
    n_mtp = integer(cfg, "num_nextn_predict_layers", 0, MAX_DRAFT_LAYERS, 0)

    def mla_layer(i: int, draft: bool) -> AttentionLayer:
        return AttentionLayer(
            index=i,
            kind="mla",
            num_kv_heads=1,
            head_size=kv_lora + rope,
            head_size_v=0,
            index_head_dim=index_head_dim,
            is_draft=draft,
        )

    layers = tuple(mla_layer(i, False) for i in range(n_layers)) + tuple(
        mla_layer(n_layers + j, True) for j in range(n_mtp)
    )
    q_params = (
        hidden * q_lora + q_lora * heads * (nope + rope)
        if q_lora
        else hidden * heads * (nope + rope)
    )
    attn_one = (
        q_params
        + hidden * (kv_lora + rope)
        + kv_lora * heads * (nope + v_head)
        + heads * v_head * hidden
    )
    if index_head_dim:
        n_idx = integer(cfg, "index_n_heads", 1, MAX_HEADS, 64)
        attn_one += (q_lora or hidden) * n_idx * index_head_dim
        attn_one += hidden * index_head_dim + hidden * n_idx
    inter = integer(cfg, "intermediate_size", 1, MAX_INTERMEDIATE)
    n_experts = integer(cfg, "n_routed_experts", 0, MAX_EXPERTS, 0)
    first_dense = integer(cfg, "first_k_dense_replace", 0, MAX_INDEX, 0 if n_experts else n_layers)
    freq = integer(cfg, "moe_layer_freq", 1, MAX_LAYERS, 1)
    moe_layers = (
        sum(1 for i in range(n_layers) if i >= first_dense and i % freq == 0) if n_experts else 0
    )
    dense_layers = n_layers - moe_layers
    e_inter = integer(cfg, "moe_intermediate_size", 1, MAX_INTERMEDIATE, inter)
    n_shared = integer(cfg, "n_shared_experts", 0, MAX_SHARED_EXPERTS, 0)
    topk = (
        integer(cfg, "num_experts_per_tok", 0, n_experts, 0, note="n_routed_experts")
        if n_experts
        else 0
    )
    expert_one = 3 * hidden * e_inter
    experts = moe_layers * n_experts * expert_one
    shared = moe_layers * n_shared * expert_one
    router = moe_layers * hidden * n_experts
    moe = MoEShape(n_experts, n_shared, topk, e_inter, moe_layers) if n_experts else None
    embed = c["vocab_size"] * hidden
    tied = flag(cfg, "tie_word_embeddings", False)
    # One MTP layer: a full decoder layer (MoE) + eh_proj (2h -> h) + norms; it shares the
    # embeddings and the head with the target model.
    mtp_dense = attn_one + n_shared * expert_one + hidden * n_experts
    mtp_dense += 2 * hidden * hidden + 4 * hidden
    params = ParamCounts(
        embedding=embed,
        lm_head=0 if tied else embed,
        attention=n_layers * attn_one,
        dense_mlp=dense_layers * 3 * hidden * inter,
        experts=experts,
        shared_experts=shared,
        router=router,
        norms=(2 * n_layers + 1) * hidden + n_layers * (kv_lora + (q_lora or 0)),
        draft_layer=mtp_dense,
        draft_layer_experts=n_experts * expert_one,
    )
    active = params.total - experts + moe_layers * topk * expert_one
    return ModelArch(
        family=family,
        layers=layers,
        params=params,
        active_params=active,
        weights_format=weights_format(cfg, c["dtype"]),
        moe=moe,
        num_mtp_layers=n_mtp,
        use_mla=True,
        **c,
    )


def generic_non_kv(arch: ModelArch, s: EngineSettings) -> NonKVEstimate:
    """A first-order model of the profiling run's peak (vLLM measures it at start-up,
    vllm/utils/mem_utils.py: memory_profiling):

    - activations: max_num_batched_tokens x (4 hidden + 2 MLP-intermediate per rank)
      values in the model dtype (residual, norm, attention in/out, the gate/up product);
    - sampler: max_num_seqs x vocab logits in fp32 (the dummy sampler run);
    - non-torch: NCCL and custom all-reduce buffers, 0.5 GiB with TP > 1, 0.1 GiB alone.
    """
    tp = s.tensor_parallel_size
    dtype = arch.dtype_bytes
    inter = 4 * arch.hidden_size
    if arch.moe is not None:
        inter = arch.moe.expert_intermediate_size * max(arch.moe.experts_per_token, 1)
    tokens = s.max_num_batched_tokens
    activations = tokens * (4 * arch.hidden_size + 2 * inter // tp) * dtype
    sampler = s.max_num_seqs * arch.vocab_size * 4
    non_torch = 512 * MIB if tp > 1 else 100 * MIB
    return NonKVEstimate(
        parts={"activations": activations, "sampler": sampler, "non_torch": non_torch},
        sources=(
            "non-KV memory on GPU is estimated (activations of one max_num_batched_tokens "
            "pass, fp32 sampler logits for max_num_seqs, NCCL buffers); vLLM measures it at "
            "start-up - compare with its 'Available KV cache memory' line",
        ),
    )


def read_chosen(cfg: Mapping[str, Any], choice: Choice) -> ModelArch:
    """ModelArch by the reader `choice` names."""
    family = choice.family
    if family in MLA_FAMILIES:
        return read_deepseek_mla(cfg, family)
    if family == "gpt_oss":
        return read_gpt_oss(cfg)
    if family == "glm4_moe":
        return read_glm4_moe(cfg)
    if family == "llama4":
        return read_llama4(cfg)
    if family != BY_FIELDS:
        return read_gqa(cfg, family)
    if cfg.get("kv_lora_rank") is not None:
        model_type = str(text(cfg, "model_type", "", name=True))
        if model_type not in MLA_MODEL_TYPES:
            raise ConfigValueError(
                "kv_lora_rank",
                f"is set, but vLLM runs model_type {model_type!r} with per-head keys and "
                "values, not MLA (is_deepseek_mla lists the MLA model types)",
                hint=f"MLA model types: {', '.join(MLA_MODEL_TYPES)}",
            )
        return read_deepseek_mla(cfg, "deepseek_v3")
    arch, how = read_by_fields(cfg)
    return replace(arch, notes=(*arch.notes, f"layer kinds from {how}"))


def read_any(cfg: Mapping[str, Any]) -> ModelArch:
    """ModelArch of a config of any model type vLLM runs with attention caches: a listed
    type by its reader, any other by its architectures and fields (reader_choice). A field
    the reader needs and the config lacks is refused, naming it and what vLLM would do."""
    choice = choose(cfg, LISTED_TYPES)
    try:
        arch = read_chosen(cfg, choice)
    except ConfigValueError as exc:
        if choice.note is None or exc.problem not in ("is missing", "is null"):
            raise
        raise ConfigValueError(
            exc.key,
            f"{exc.problem}: vLLM would run this model with {choice.vllm_code}, which reads "
            f"{exc.key} from config.json too",
            hint=f"set {exc.key} as the checkpoint's model card gives it",
        ) from None
    if choice.note is None:
        return arch
    return replace(arch, notes=(choice.note, *arch.notes))


class GenericFamily:
    """Hugging Face models that vLLM caches with its generic attention and MLA specs."""

    name = "generic"
    model_types: Mapping[str, str] = LISTED_TYPES

    def read(self, cfg: Mapping[str, Any]) -> ModelArch:
        return read_any(cfg)

    def engine_defaults(self, arch: ModelArch) -> EngineDefaults:
        # CpuPlatform.check_and_update_config: without AMX tiles the reference CPU MLA
        # kernel needs block_size 16 and chunked prefill and prefix caching go off; with
        # AMX (the AMX_MLA backend) neither applies. On GPU FlashMLA prefers 64, the
        # CacheConfig default is 16.
        return EngineDefaults(
            gpu_block_size=64 if arch.use_mla else 16,
            cpu_block_size=16 if arch.use_mla else None,
            cpu_amx_block_size=None,
            cpu_mla=arch.use_mla,
        )

    def layer_specs(self, arch: ModelArch, settings: EngineSettings) -> dict[str, KVSpec]:
        return generic_layer_specs(arch, settings)

    def accounting(self, specs: dict[str, KVSpec], settings: EngineSettings) -> Accounting:
        return generic_accounting(specs)

    def draft_layers_loaded(self, arch: ModelArch, settings: EngineSettings) -> int:
        return settings.num_draft_layers

    def non_kv(
        self, arch: ModelArch, settings: EngineSettings, max_model_len: int
    ) -> NonKVEstimate:
        return generic_non_kv(arch, settings)

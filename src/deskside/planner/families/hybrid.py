"""Hybrid models whose layers keep a recurrent state instead of a KV cache, beside a few
attention layers: Qwen3-Next and Qwen3.5 (gated delta net "linear_attention" layers) and
Nemotron-H (Mamba2 "M" layers).

vLLM gives every recurrent layer a MambaSpec (a fixed state per request, padded to the
attention page) and raises the attention block size until one attention page holds one
state page (deskside.planner.families.mamba_state); the groups, the pool block and the
capacity line then follow its generic rules (deskside.planner.kv).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from deskside.planner.bounds import (
    MAX_DRAFT_LAYERS,
    MAX_EXPERTS,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_INTERMEDIATE,
    MAX_POSITIONS,
)
from deskside.planner.families.config_values import (
    ConfigValueError,
    entry_in,
    flag,
    integer,
    items,
    positive_quotient,
    text,
)
from deskside.planner.families.generic import generic_non_kv
from deskside.planner.families.generic_cache import gqa_spec, kv_heads_per_rank
from deskside.planner.families.hf_config import common_fields, weights_format
from deskside.planner.families.mamba_state import STATE_DTYPE_BYTES, hybrid_layout
from deskside.planner.kv import Accounting, KVSpec, generic_accounting
from deskside.planner.types import (
    AttentionLayer,
    EngineDefaults,
    EngineSettings,
    ModelArch,
    MoEShape,
    NonKVEstimate,
    ParamCounts,
    RecurrentState,
)

# config.json model_type (of the text config) -> ModelArch.family
MODEL_TYPES: dict[str, str] = {
    "qwen3_next": "qwen3_next",
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5_moe",
    "nemotron_h": "nemotron_h",
}
QWEN_HYBRID = ("qwen3_next", "qwen3_5", "qwen3_5_moe")

# Nemotron-H's hybrid_override_pattern (NemotronHConfig._pattern_to_list)
NEMOTRON_PATTERN = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
# transformers' layers_block_type names for the same layers
NEMOTRON_BLOCK_TYPES = {
    "linear_attention": "mamba",
    "full_attention": "attention",
    "mlp": "mlp",
    "moe": "moe",
    "mamba": "mamba",
    "attention": "attention",
}

STATE_NOTE = (
    "the recurrent layers' state cache (shapes, dtypes, padding to the attention page, "
    "pages per request) is derived from vLLM 0.32's code (MambaStateShapeCalculator, "
    "MambaSpec, Platform._align_hybrid_block_size)"
)


def _qwen_layer_types(cfg: Mapping[str, Any], n_layers: int) -> list[str]:
    """Qwen3NextConfig / Qwen3_5TextConfig.__post_init__: layer_types as given, or every
    full_attention_interval-th layer full attention and the others linear attention."""
    given = items(cfg, "layer_types", n_layers, "one per layer: num_hidden_layers")
    if given is not None:
        return [
            str(entry_in("layer_types", i, t, ("linear_attention", "full_attention")))
            for i, t in enumerate(given[:n_layers])
        ]
    interval = integer(cfg, "full_attention_interval", 1, n_layers, 4)
    return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(n_layers)]


def _nemotron_layer_types(cfg: Mapping[str, Any]) -> list[str]:
    """NemotronHConfig: hybrid_override_pattern (M Mamba2, * attention, - MLP, E MoE), or
    layers_block_type / layer_types; its length is the number of layers."""
    pattern = cfg.get("hybrid_override_pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or not 1 <= len(pattern) <= 1000:
            raise ConfigValueError(
                "hybrid_override_pattern", "is not a string of 1 to 1000 layer letters"
            )
        return [
            NEMOTRON_PATTERN[str(entry_in("hybrid_override_pattern", i, ch, "M*-E"))]
            for i, ch in enumerate(pattern)
        ]
    for key in ("layers_block_type", "layer_types"):
        given = items(cfg, key, 1, "one per layer")
        if given is not None:
            return [
                NEMOTRON_BLOCK_TYPES[str(entry_in(key, i, t, tuple(NEMOTRON_BLOCK_TYPES)))]
                for i, t in enumerate(given)
            ]
    # NemotronHConfig.__post_init__: without either, four layers of each kind
    return ["mamba", "moe", "attention", "mlp"]


def _ssm_dtype(cfg: Mapping[str, Any], key: str, default: str) -> str:
    value = str(text(cfg, key, default, name=True))
    allowed = ("auto", *STATE_DTYPE_BYTES)
    if value not in allowed:
        raise ConfigValueError(key, f"is {value!r}; expected one of {', '.join(allowed)}")
    return value


def _attention_heads(cfg: Mapping[str, Any], hidden: int, heads: int) -> tuple[int, int]:
    """(num_key_value_heads, head_dim) of a hybrid model's attention layers: KV heads
    default to the attention heads, head_dim to hidden_size / num_attention_heads."""
    kv_heads = integer(cfg, "num_key_value_heads", 1, heads, heads, note="num_attention_heads")
    head_dim = integer(cfg, "head_dim", 1, MAX_HEAD_DIM, None) or positive_quotient(
        "hidden_size", hidden, "num_attention_heads", heads
    )
    return kv_heads, head_dim


# what a hybrid model's layer caches: KV (attention) or a recurrent state (gdn, mamba2)
CachedKind = Literal["attention", "gdn", "mamba2"]


def _cached_layers(
    kinds: Sequence[CachedKind | None],
    n_layers: int,
    n_drafts: int,
    kv_heads: int,
    head_dim: int,
    window: int | None = None,
) -> tuple[AttentionLayer, ...]:
    """The layers that cache something, by index: attention layers (K and V of kv_heads x
    head_dim, sliding when `window` is set) and recurrent ones (no KV: their state is
    counted apart); None marks a layer that caches nothing. Then `n_drafts` MTP draft
    attention layers, numbered on after the `n_layers` target layers."""

    def attention(i: int, draft: bool) -> AttentionLayer:
        return AttentionLayer(
            index=i,
            kind="sliding" if window else "full",
            num_kv_heads=kv_heads,
            head_size=head_dim,
            head_size_v=head_dim,
            sliding_window=window,
            is_draft=draft,
        )

    return tuple(
        attention(i, False)
        if kind == "attention"
        else AttentionLayer(index=i, kind=kind, num_kv_heads=0, head_size=0, head_size_v=0)
        for i, kind in enumerate(kinds)
        if kind is not None
    ) + tuple(attention(n_layers + j, True) for j in range(n_drafts))


def read_qwen_hybrid(cfg: Mapping[str, Any], family: str) -> ModelArch:
    """Qwen3-Next / Qwen3.5: gated delta net layers (Qwen3NextGatedDeltaNet) and gated
    full attention layers (Qwen3NextAttention: K and V of num_key_value_heads x head_dim)."""
    c = common_fields(cfg)
    hidden, n_layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv_heads, head_dim = _attention_heads(cfg, hidden, heads)
    state = RecurrentState(
        kind="gdn",
        num_k_heads=integer(cfg, "linear_num_key_heads", 1, MAX_HEADS),
        num_v_heads=integer(cfg, "linear_num_value_heads", 1, MAX_HEADS),
        head_k_dim=integer(cfg, "linear_key_head_dim", 1, MAX_HEAD_DIM),
        head_v_dim=integer(cfg, "linear_value_head_dim", 1, MAX_HEAD_DIM),
        conv_kernel=integer(cfg, "linear_conv_kernel_dim", 1, 64),
        # Qwen3_5ForConditionalGenerationConfig: the config's mamba_ssm_dtype fills "auto"
        ssm_cache_dtype=_ssm_dtype(cfg, "mamba_ssm_dtype", "auto")
        if family != "qwen3_next"
        else "auto",
    )
    types = _qwen_layer_types(cfg, n_layers)
    # Qwen3NextMultiTokenPredictor: num_nextn_predict_layers (1 when unset); Qwen3.5:
    # mtp_num_hidden_layers (SpeculativeConfig)
    mtp_key = "num_nextn_predict_layers" if family == "qwen3_next" else "mtp_num_hidden_layers"
    n_mtp = integer(cfg, mtp_key, 0, MAX_DRAFT_LAYERS, 1 if family == "qwen3_next" else 0)
    layers = _cached_layers(
        ["attention" if t == "full_attention" else "gdn" for t in types],
        n_layers,
        n_mtp,
        kv_heads,
        head_dim,
    )

    # Parameters (Qwen3NextAttention, Qwen3NextGatedDeltaNet, Qwen3NextSparseMoeBlock).
    key_dim = state.num_k_heads * state.head_k_dim
    value_dim = state.num_v_heads * state.head_v_dim
    conv_dim = 2 * key_dim + value_dim
    gdn_one = (
        hidden * (2 * key_dim + 2 * value_dim)  # in_proj_qkvz
        + hidden * 2 * state.num_v_heads  # in_proj_ba
        + conv_dim * state.conv_kernel  # conv1d
        + value_dim * hidden  # out_proj
        + 2 * state.num_v_heads
        + state.head_v_dim
    )
    attn_one = (
        hidden * heads * head_dim * 2  # q_proj with its output gate
        + 2 * hidden * kv_heads * head_dim
        + heads * head_dim * hidden
        + 2 * head_dim
    )
    n_attn = types.count("full_attention")
    n_gdn = n_layers - n_attn
    inter = integer(cfg, "intermediate_size", 1, MAX_INTERMEDIATE, 4 * hidden)
    n_experts = integer(cfg, "num_experts", 0, MAX_EXPERTS, 0)
    moe: MoEShape | None = None
    experts = shared = router = active_experts = 0
    dense_layers = n_layers
    expert_one = 0
    shared_one = 0
    if n_experts:
        e_inter = integer(cfg, "moe_intermediate_size", 1, MAX_INTERMEDIATE, inter)
        topk = integer(cfg, "num_experts_per_tok", 1, n_experts, 1, note="num_experts")
        shared_inter = integer(cfg, "shared_expert_intermediate_size", 0, MAX_INTERMEDIATE, 0)
        step = integer(cfg, "decoder_sparse_step", 1, n_layers, 1)
        only = items(cfg, "mlp_only_layers", 0, "layer indices") or []
        dense_set = {
            int(entry_in("mlp_only_layers", i, v, range(n_layers))) for i, v in enumerate(only)
        }
        moe_layers = sum(1 for i in range(n_layers) if i not in dense_set and (i + 1) % step == 0)
        dense_layers = n_layers - moe_layers
        expert_one = 3 * hidden * e_inter
        shared_one = 3 * hidden * shared_inter + (hidden if shared_inter else 0)
        moe = MoEShape(n_experts, 1 if shared_inter else 0, topk, e_inter, moe_layers)
        experts = moe_layers * n_experts * expert_one
        shared = moe_layers * shared_one
        router = moe_layers * hidden * n_experts
        active_experts = moe_layers * topk * expert_one
    tied = flag(cfg, "tie_word_embeddings", False)
    embed = c["vocab_size"] * hidden
    params = ParamCounts(
        embedding=embed,
        lm_head=0 if tied else embed,
        attention=n_attn * attn_one + n_gdn * gdn_one,
        dense_mlp=dense_layers * 3 * hidden * inter,
        experts=experts,
        shared_experts=shared,
        router=router,
        norms=(2 * n_layers + 1) * hidden,
        # one MTP layer: fc (2h -> h), a full attention decoder layer, its norms
        draft_layer=2 * hidden * hidden + attn_one + shared_one + hidden * n_experts + 4 * hidden
        if n_experts
        else 2 * hidden * hidden + attn_one + 3 * hidden * inter + 4 * hidden,
        draft_layer_experts=n_experts * expert_one,
    )
    return ModelArch(
        family=family,
        layers=layers,
        params=params,
        active_params=params.total - experts + active_experts,
        weights_format=weights_format(cfg, c["dtype"]),
        moe=moe,
        num_mtp_layers=n_mtp,
        notes=(STATE_NOTE,),
        recurrent=state,
        **c,
    )


def read_nemotron_h(cfg: Mapping[str, Any]) -> ModelArch:
    """Nemotron-H: Mamba2 mixers (MambaMixer2), grouped-query attention layers
    (NemotronHAttention), squared-ReLU MLP and MoE layers, by hybrid_override_pattern."""
    types = _nemotron_layer_types(cfg)
    cfg = {**cfg, "num_hidden_layers": len(types)}  # NemotronHConfig.num_hidden_layers
    c = common_fields(cfg)
    hidden, n_layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv_heads, head_dim = _attention_heads(cfg, hidden, heads)
    window = integer(cfg, "sliding_window", 0, MAX_POSITIONS, None) or None

    def pick(*keys: str, lo: int, hi: int, default: Any = None) -> int:
        for key in keys:  # NemotronHConfig.__post_init__ reads the mamba_* aliases first
            if cfg.get(key) is not None:
                return int(integer(cfg, key, lo, hi))
        if default is None:
            return int(integer(cfg, keys[-1], lo, hi))
        return int(default)

    state = RecurrentState(
        kind="mamba2",
        num_k_heads=pick("mamba_n_groups", "n_groups", lo=1, hi=MAX_HEADS, default=8),
        num_v_heads=pick("mamba_num_heads", lo=1, hi=MAX_HEADS * 8, default=128),
        head_k_dim=pick("ssm_state_size", lo=1, hi=4096, default=128),
        head_v_dim=pick("mamba_head_dim", lo=1, hi=MAX_HEAD_DIM, default=64),
        conv_kernel=pick("mamba_d_conv", "conv_kernel", lo=1, hi=64, default=4),
        # NemotronHForCausalLMConfig: "auto" takes the config's value, float32 by default
        ssm_cache_dtype=_ssm_dtype(cfg, "mamba_ssm_cache_dtype", "float32"),
    )
    mtp_types = cfg.get("mtp_layers_block_type") or ["full_attention", "moe"]
    n_mtp = integer(cfg, "num_nextn_predict_layers", 0, MAX_DRAFT_LAYERS, 0)
    mtp_attention = (
        sum(1 for t in mtp_types if NEMOTRON_BLOCK_TYPES.get(str(t)) == "attention")
        if isinstance(mtp_types, Sequence)
        else 1
    )
    cached: dict[str, CachedKind] = {"attention": "attention", "mamba": "mamba2"}
    layers = _cached_layers(
        [cached.get(t) for t in types],  # MLP and MoE layers cache nothing
        n_layers,
        n_mtp * mtp_attention,
        kv_heads,
        head_dim,
        window,
    )

    # Parameters (MambaMixer2, NemotronHAttention, NemotronHMLP, NemotronHMoE).
    intermediate = state.num_v_heads * state.head_v_dim
    groups_state = 2 * state.num_k_heads * state.head_k_dim
    mamba_one = (
        hidden * (2 * intermediate + groups_state + state.num_v_heads)  # in_proj
        + (intermediate + groups_state) * (state.conv_kernel + 1)  # conv1d + bias
        + 3 * state.num_v_heads
        + intermediate  # gated norm
        + intermediate * hidden  # out_proj
    )
    attn_one = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden
    inter = integer(cfg, "intermediate_size", 1, MAX_INTERMEDIATE, 4 * hidden)
    n_experts = integer(cfg, "n_routed_experts", 0, MAX_EXPERTS, 0)
    n_moe = types.count("moe")
    moe: MoEShape | None = None
    experts = shared = router = active_experts = 0
    expert_one = 0
    if n_moe and n_experts:
        e_inter = integer(cfg, "moe_intermediate_size", 1, MAX_INTERMEDIATE, inter)
        topk = integer(cfg, "num_experts_per_tok", 1, n_experts, 1, note="n_routed_experts")
        s_inter = integer(cfg, "moe_shared_expert_intermediate_size", 0, MAX_INTERMEDIATE, 0)
        n_shared = integer(cfg, "n_shared_experts", 0, 64, 1)
        expert_one = 2 * hidden * e_inter  # up and down (squared ReLU, no gate)
        moe = MoEShape(n_experts, n_shared, topk, e_inter, n_moe)
        experts = n_moe * n_experts * expert_one
        shared = n_moe * n_shared * 2 * hidden * s_inter
        router = n_moe * hidden * n_experts
        active_experts = n_moe * topk * expert_one
    embed = c["vocab_size"] * hidden
    tied = flag(cfg, "tie_word_embeddings", False)
    params = ParamCounts(
        embedding=embed,
        lm_head=0 if tied else embed,
        attention=types.count("attention") * attn_one + types.count("mamba") * mamba_one,
        dense_mlp=types.count("mlp") * 2 * hidden * inter,
        experts=experts,
        shared_experts=shared,
        router=router,
        norms=(n_layers + 1) * hidden,
        draft_layer=attn_one + 2 * hidden * hidden + 4 * hidden,
        draft_layer_experts=n_experts * expert_one,
    )
    return ModelArch(
        family="nemotron_h",
        layers=layers,
        params=params,
        active_params=params.total - experts + active_experts,
        weights_format=weights_format(cfg, c["dtype"]),
        moe=moe,
        num_mtp_layers=n_mtp,
        notes=(STATE_NOTE,),
        recurrent=state,
        **c,
    )


def _num_spec(s: EngineSettings) -> int:
    """VllmConfig.num_speculative_tokens (0 without speculative decoding)."""
    return s.speculative.num_speculative_tokens if s.speculative else 0


def _prefix(arch: ModelArch, layer: AttentionLayer) -> str:
    return f"model.layers.{layer.index}"


def hybrid_layer_specs(arch: ModelArch, s: EngineSettings) -> tuple[dict[str, KVSpec], Any]:
    """The spec of every cached layer of one rank in registration order, and the layout
    vLLM settled (block size, state page)."""
    state = arch.recurrent
    assert state is not None
    attn = next((layer for layer in arch.layers if layer.kind in ("full", "sliding")), None)
    # Platform._align_hybrid_block_size: FullAttentionSpec(block_size=1) of the model's
    # head size and KV heads per rank, in the KV cache dtype (no attention layer: no
    # attention backend, nothing to align)
    one_token = 0
    if attn is not None:
        heads = kv_heads_per_rank(attn.num_kv_heads, s.tensor_parallel_size)
        one_token = heads * (attn.head_size + attn.head_size_v) * s.kv_dtype_bytes
    layout = hybrid_layout(
        state,
        model_dtype=arch.dtype,
        device=s.device,
        tp=s.tensor_parallel_size,
        num_spec=_num_spec(s),
        block_size=s.block_size,
        attn_page_one_token=one_token,
        prefix_caching=s.enable_prefix_caching,
        max_model_len=s.max_model_len or s.derived_max_model_len,
        # MambaMixer2.get_kv_cache_spec adds one prefill checkpoint page; the gated
        # delta net does not
        checkpoint_blocks=1 if state.kind == "mamba2" else 0,
    )
    aligned = replace(s, block_size=layout.block_size)
    mamba = layout.mamba_spec()
    specs: dict[str, KVSpec] = {}
    drafts = 0
    for layer in arch.layers:
        if layer.is_draft:
            if drafts >= s.num_draft_layers:
                continue
            drafts += 1
        prefix = _prefix(arch, layer)
        if layer.kind == "gdn":
            specs[f"{prefix}.linear_attn"] = mamba
        elif layer.kind == "mamba2":
            specs[f"{prefix}.mixer"] = mamba
        elif arch.family == "nemotron_h":
            specs[f"{prefix}.mixer.attn"] = gqa_spec(layer, aligned)
        else:
            specs[f"{prefix}.self_attn.attn"] = gqa_spec(layer, aligned)
    return specs, layout


class HybridFamily:
    """Hybrid attention / recurrent-state models (Qwen3-Next, Qwen3.5, Nemotron-H)."""

    name = "hybrid"
    model_types: Mapping[str, str] = MODEL_TYPES

    def read(self, cfg: Mapping[str, Any]) -> ModelArch:
        family = MODEL_TYPES[str(text(cfg, "model_type", "", name=True))]
        if family == "nemotron_h":
            return read_nemotron_h(cfg)
        return read_qwen_hybrid(cfg, family)

    def engine_defaults(self, arch: ModelArch) -> EngineDefaults:
        # CacheConfig's 16 on GPU, the CPU's 128 (CpuPlatform.check_and_update_config);
        # the hybrid alignment raises it later (hybrid_layer_specs)
        return EngineDefaults(
            gpu_block_size=16, cpu_block_size=None, cpu_amx_block_size=None, cpu_mla=False
        )

    def layer_specs(self, arch: ModelArch, settings: EngineSettings) -> dict[str, KVSpec]:
        return hybrid_layer_specs(arch, settings)[0]

    def accounting(self, specs: dict[str, KVSpec], settings: EngineSettings) -> Accounting:
        acct = generic_accounting(specs)
        attention = [s for s in specs.values() if s.type != "mamba"]
        mamba = next((s for s in specs.values() if s.type == "mamba"), None)
        if not attention or mamba is None:
            return acct
        block = attention[0].block_size
        notes = [
            f"hybrid model: vLLM sets the attention block size to {block} tokens so that "
            f"one attention page ({mamba.page_size_bytes:,} B) holds a layer's recurrent "
            f"state, padded to that page; each request holds {mamba.state_pages} state "
            f"pages per recurrent layer (mamba cache mode {mamba.variant.rsplit(':', 1)[-1]})"
        ]
        if settings.device == "cpu":
            notes.append(
                "on CPU the SSM state is float32 unless the config asks for float16 or "
                "bfloat16 (vLLM's CPU platform, on a CPU with AVX-512 BF16)"
            )
        return replace(acct, block_size=block, notes=tuple(notes))

    def draft_layers_loaded(self, arch: ModelArch, settings: EngineSettings) -> int:
        return settings.num_draft_layers

    def non_kv(
        self, arch: ModelArch, settings: EngineSettings, max_model_len: int
    ) -> NonKVEstimate:
        return generic_non_kv(arch, settings)

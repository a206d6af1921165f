"""Read a Hugging Face `config.json` into a ModelArch: what every layer caches, how big the
model is, and how many bytes its weights take in a given format.

Pure: takes the parsed JSON (a dict). The rules follow what vLLM does with the same config
(which layers slide, how MLA heads are sized, how many draft layers MTP adds), citing the
vLLM or transformers code they mirror.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from deskside.errors import ModelConfigError

AttentionKind = Literal["full", "sliding", "mla", "v4"]

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
    weights_format: str  # bf16 | fp16 | fp8 | nvfp4 | mxfp4 | fp8+mxfp4
    moe: MoEShape | None = None
    num_mtp_layers: int = 0  # num_nextn_predict_layers
    use_mla: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

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
    }


# --------------------------------------------------------------------------- reading


def _get(cfg: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = cfg.get(key, default)
    return default if value is None else value


def _int(cfg: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise ModelConfigError(
            f"config.json has no {key!r}",
            hint="deskside needs it to size the KV cache; is this a causal LM config?",
        )
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise ModelConfigError(f"config.json: {key!r} must be an integer, got {value!r}")
    return int(value)


def _text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """Multimodal wrappers keep the language model under text_config."""
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and "num_hidden_layers" in text:
        merged = dict(text)
        merged.setdefault("architectures", cfg.get("architectures"))
        merged.setdefault("torch_dtype", cfg.get("torch_dtype"))
        return merged
    return cfg


def _weights_format(cfg: Mapping[str, Any], dtype: str) -> str:
    """The checkpoint's weight format from its quantization_config."""
    q = cfg.get("quantization_config")
    if not isinstance(q, Mapping):
        return "fp16" if dtype in ("float16", "half") else "bf16"
    method = str(q.get("quant_method", "")).lower()
    fmt = str(q.get("fmt", q.get("format", ""))).lower()
    if method == "fp8" or "e4m3" in fmt:
        expert = str(q.get("expert_dtype", q.get("moe_format", ""))).lower()
        return "fp8+mxfp4" if "mxfp4" in expert or "fp4" in expert else "fp8"
    if method in ("mxfp4",):
        return "mxfp4"
    if "nvfp4" in method or "nvfp4" in fmt or method == "modelopt_fp4":
        return "nvfp4"
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).lower()
        return "nvfp4" if "fp4" in algo else "fp8"
    if method == "compressed-tensors":
        text = str(q).lower()
        if "nvfp4" in text or "'num_bits': 4" in text:
            return "nvfp4"
        return "fp8"
    return "bf16"


def _layer_types(cfg: Mapping[str, Any], family: str, n_layers: int) -> list[str]:
    """Which layers slide, as transformers fills `layer_types` when config.json lacks it
    (Gemma2Config/Gemma3Config/Qwen2Config/Qwen3Config.__post_init__), and as vLLM then
    applies it (EngineArgs.create_engine_config: the model-level window only when every
    layer slides or no layer_types exist)."""
    given = cfg.get("layer_types")
    if isinstance(given, list) and len(given) >= n_layers:
        return [str(t) for t in given[:n_layers]]
    window = cfg.get("sliding_window")
    if family == "gemma3":
        pattern = int(_get(cfg, "sliding_window_pattern", 6))
        return [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)
        ]
    if family == "gemma2":
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers)]
    if family in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        use = bool(cfg.get("use_sliding_window", False)) and window is not None
        first = int(_get(cfg, "max_window_layers", n_layers))
        return [
            "sliding_attention" if use and i >= first else "full_attention" for i in range(n_layers)
        ]
    # Llama, Mistral and others: one model-level window applies to every layer.
    kind = "sliding_attention" if window else "full_attention"
    return [kind] * n_layers


FAMILIES: dict[str, str] = {
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
    "deepseek_v4": "deepseek_v4",
}


def read_arch(cfg: Mapping[str, Any]) -> ModelArch:
    """ModelArch from a parsed config.json. Raises ModelConfigError on what it can't read."""
    if not isinstance(cfg, Mapping):
        raise ModelConfigError("config.json is not a JSON object")
    cfg = _text_config(cfg)
    model_type = str(cfg.get("model_type", ""))
    family = FAMILIES.get(model_type)
    if family is None:
        raise ModelConfigError(
            f"model_type {model_type!r} is not one deskside can plan",
            hint="known: " + ", ".join(sorted(FAMILIES)),
        )
    if family in ("deepseek_v2", "deepseek_v3", "deepseek_v32"):
        return _read_deepseek_mla(cfg, family)
    if family == "deepseek_v4":
        from deskside.planner.arch_v4 import read_deepseek_v4

        return read_deepseek_v4(cfg)
    return _read_gqa(cfg, family)


# Keys vLLM reads for a model's length limit (ModelArchConfigConvertorBase
# .derive_max_model_len_and_key: the smallest one present wins).
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# RoPE types whose max_position_embeddings is already scaled (_get_and_verify_max_len).
UNSCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def derived_max_model_len(cfg: Mapping[str, Any]) -> int:
    """The model's own length limit as vLLM derives it (_get_and_verify_max_len): the
    smallest length key, model_max_length when set, times a RoPE scaling factor unless
    the RoPE type already scaled max_position_embeddings (or the model is Gemma3)."""
    lengths = [int(v) for k in MAX_LEN_KEYS if isinstance(v := cfg.get(k), int | float)]
    derived = min(lengths) if lengths else 2048
    if isinstance(cfg.get("model_max_length"), int):
        derived = int(cfg["model_max_length"])
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if isinstance(rope, Mapping) and "gemma3" not in str(cfg.get("model_type", "")):
        kind = str(rope.get("rope_type", rope.get("type", "default")))
        factor = rope.get("factor")
        if kind not in (*UNSCALED_ROPE, "default") and isinstance(factor, int | float):
            derived = int(derived * factor)
    return derived


def _common(cfg: Mapping[str, Any]) -> dict[str, Any]:
    archs = cfg.get("architectures") or ["?"]
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    return {
        "architecture": str(archs[0]),
        "model_type": str(cfg.get("model_type")),
        "hidden_size": _int(cfg, "hidden_size"),
        "num_hidden_layers": _int(cfg, "num_hidden_layers"),
        "num_attention_heads": _int(cfg, "num_attention_heads"),
        "vocab_size": _int(cfg, "vocab_size"),
        "max_position_embeddings": derived_max_model_len(cfg),
        "dtype": dtype,
    }


def _read_gqa(cfg: Mapping[str, Any], family: str) -> ModelArch:
    c = _common(cfg)
    hidden, n_layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv_heads = _int(cfg, "num_key_value_heads", heads)
    head_dim = int(_get(cfg, "head_dim", hidden // heads))
    window = cfg.get("sliding_window")
    types = _layer_types(cfg, family, n_layers)
    layers = tuple(
        AttentionLayer(
            index=i,
            kind="sliding" if t == "sliding_attention" and window else "full",
            num_kv_heads=kv_heads,
            head_size=head_dim,
            head_size_v=head_dim,
            sliding_window=int(window) if t == "sliding_attention" and window else None,
        )
        for i, t in enumerate(types)
    )
    inter = _int(cfg, "intermediate_size", 4 * hidden)
    attn = n_layers * (hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2)
    moe: MoEShape | None = None
    experts = shared = router = 0
    dense_mlp = n_layers * 3 * hidden * inter
    active_experts = 0
    n_experts = int(_get(cfg, "num_experts", 0))
    if n_experts:
        e_inter = _int(cfg, "moe_intermediate_size", inter)
        topk = _int(cfg, "num_experts_per_tok", 1)
        shared_inter = int(_get(cfg, "shared_expert_intermediate_size", 0))
        moe = MoEShape(n_experts, 1 if shared_inter else 0, topk, e_inter, n_layers)
        experts = n_layers * n_experts * 3 * hidden * e_inter
        shared = n_layers * 3 * hidden * shared_inter
        router = n_layers * hidden * n_experts
        dense_mlp = 0
        active_experts = n_layers * topk * 3 * hidden * e_inter
    tied = bool(cfg.get("tie_word_embeddings", family in ("gemma2", "gemma3")))
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
        weights_format=_weights_format(cfg, c["dtype"]),
        moe=moe,
        **c,
    )


def _read_deepseek_mla(cfg: Mapping[str, Any], family: str) -> ModelArch:
    """DeepSeek V2/V3/V3.2: MLA caches one latent of kv_lora_rank + qk_rope_head_dim per
    token and layer (MLAAttention.get_kv_cache_spec: num_kv_heads=1, replicated on every TP
    rank); V3.2 adds an indexer key cache (DeepseekV32IndexerCache.get_kv_cache_spec);
    num_nextn_predict_layers MTP layers follow the target layers."""
    c = _common(cfg)
    hidden, n_layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv_lora = _int(cfg, "kv_lora_rank")
    rope = _int(cfg, "qk_rope_head_dim")
    nope = _int(cfg, "qk_nope_head_dim")
    v_head = _int(cfg, "v_head_dim")
    q_lora = cfg.get("q_lora_rank")
    index_head_dim = cfg.get("index_head_dim") if family == "deepseek_v32" else None
    n_mtp = int(_get(cfg, "num_nextn_predict_layers", 0))

    def mla_layer(i: int, draft: bool) -> AttentionLayer:
        return AttentionLayer(
            index=i,
            kind="mla",
            num_kv_heads=1,
            head_size=kv_lora + rope,
            head_size_v=0,
            index_head_dim=int(index_head_dim) if index_head_dim else None,
            is_draft=draft,
        )

    layers = tuple(mla_layer(i, False) for i in range(n_layers)) + tuple(
        mla_layer(n_layers + j, True) for j in range(n_mtp)
    )
    q_params = (
        hidden * int(q_lora) + int(q_lora) * heads * (nope + rope)
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
        n_idx = int(_get(cfg, "index_n_heads", 64))
        attn_one += int(q_lora or hidden) * n_idx * int(index_head_dim)
        attn_one += hidden * int(index_head_dim) + hidden * n_idx
    inter = _int(cfg, "intermediate_size")
    n_experts = int(_get(cfg, "n_routed_experts", 0))
    first_dense = int(_get(cfg, "first_k_dense_replace", 0 if n_experts else n_layers))
    freq = int(_get(cfg, "moe_layer_freq", 1))
    moe_layers = (
        sum(1 for i in range(n_layers) if i >= first_dense and i % freq == 0) if n_experts else 0
    )
    dense_layers = n_layers - moe_layers
    e_inter = int(_get(cfg, "moe_intermediate_size", inter))
    n_shared = int(_get(cfg, "n_shared_experts", 0))
    topk = int(_get(cfg, "num_experts_per_tok", 0))
    expert_one = 3 * hidden * e_inter
    experts = moe_layers * n_experts * expert_one
    shared = moe_layers * n_shared * expert_one
    router = moe_layers * hidden * n_experts
    moe = MoEShape(n_experts, n_shared, topk, e_inter, moe_layers) if n_experts else None
    embed = c["vocab_size"] * hidden
    tied = bool(cfg.get("tie_word_embeddings", False))
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
        norms=(2 * n_layers + 1) * hidden + n_layers * (kv_lora + int(q_lora or 0)),
        draft_layer=mtp_dense,
        draft_layer_experts=n_experts * expert_one,
    )
    active = params.total - experts + moe_layers * topk * expert_one
    return ModelArch(
        family=family,
        layers=layers,
        params=params,
        active_params=active,
        weights_format=_weights_format(cfg, c["dtype"]),
        moe=moe,
        num_mtp_layers=n_mtp,
        use_mla=True,
        **c,
    )

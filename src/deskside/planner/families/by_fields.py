"""A grouped-query attention model deskside has no reader of its own for, read from the
fields vLLM's attention and MoE layers read: num_attention_heads, num_key_value_heads,
head_dim; layer_types / sliding_window (+ sliding_window_pattern) for which layers slide
(attention_fields.layer_kinds_by_fields); num_experts, num_local_experts or
n_routed_experts for MoE. Chunked local attention is Llama 4's code alone in vLLM 0.32
(only llama4.py builds ChunkedLocalAttention; the Transformers backend slides only
"sliding_attention" layers): any other code attends to the whole context. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from deskside.planner.bounds import (
    MAX_EXPERTS,
    MAX_INDEX,
    MAX_INTERMEDIATE,
    MAX_POSITIONS,
    MAX_SHARED_EXPERTS,
)
from deskside.planner.families.attention_fields import (
    attention_layers,
    head_shape,
    layer_kinds_by_fields,
)
from deskside.planner.families.config_values import integer
from deskside.planner.families.decoder_params import decoder_params
from deskside.planner.families.hf_config import common_fields, weights_format
from deskside.planner.types import ModelArch, MoEShape

EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def read_by_fields(cfg: Mapping[str, Any], family: str = "generic") -> tuple[ModelArch, str]:
    """ModelArch of a grouped-query model from its fields, and which fields decided the
    layer kinds (for the plan's notes)."""
    c = common_fields(cfg)
    hidden, n_layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv_heads, head_dim = head_shape(cfg, hidden, heads)
    kinds, how = layer_kinds_by_fields(cfg, n_layers)
    window = integer(cfg, "sliding_window", 0, MAX_POSITIONS, None) or None
    layers = attention_layers(kinds, kv_heads, head_dim, window, None)
    if "chunked" in kinds:
        how += (
            "; its chunked layers keep the whole context, as vLLM builds chunked local "
            "attention only in Llama 4's code"
        )

    inter = integer(cfg, "intermediate_size", 1, MAX_INTERMEDIATE, 4 * hidden)
    expert_key = next((k for k in EXPERT_KEYS if cfg.get(k)), None)
    n_experts = integer(cfg, expert_key, 1, MAX_EXPERTS) if expert_key else 0
    first_dense = integer(cfg, "first_k_dense_replace", 0, MAX_INDEX, 0)
    moe_layers = max(0, n_layers - first_dense) if n_experts else 0
    e_inter = integer(cfg, "moe_intermediate_size", 1, MAX_INTERMEDIATE, inter)
    topk = (
        integer(cfg, "num_experts_per_tok", 1, n_experts, 1, note=str(expert_key))
        if n_experts
        else 0
    )
    shared_inter = integer(cfg, "shared_expert_intermediate_size", 0, MAX_INTERMEDIATE, 0)
    shared_inter += integer(cfg, "n_shared_experts", 0, MAX_SHARED_EXPERTS, 0) * e_inter
    attn_one = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden
    moe = (
        MoEShape(n_experts, 1 if shared_inter else 0, topk, e_inter, moe_layers)
        if n_experts
        else None
    )
    # shared experts of their own size (shared_expert_intermediate_size)
    params = replace(
        decoder_params(cfg, c, attn_one, inter, moe),
        shared_experts=moe_layers * 3 * hidden * shared_inter,
    )
    active = params.total - params.experts + moe_layers * topk * 3 * hidden * e_inter
    arch = ModelArch(
        family=family,
        layers=layers,
        params=params,
        active_params=active,
        weights_format=weights_format(cfg, c["dtype"]),
        moe=moe,
        **c,
    )
    return arch, how

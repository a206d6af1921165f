"""GLM-4.5 / 4.6 (Glm4MoeForCausalLM): grouped-query attention with partial rotary
embeddings (the rotary part changes no cache size), dense MLPs in the first
first_k_dense_replace layers and MoE with shared experts after, and
num_nextn_predict_layers MTP layers that speculative decoding (method mtp) caches.

Read as vLLM 0.32's glm4_moe.py builds it: Glm4MoeAttention (num_kv_heads =
max(1, total // tp), head_dim = config.head_dim or hidden / heads), Glm4MoeDecoderLayer
(MoE when n_routed_experts is set and layer_idx >= first_k_dense_replace) and
glm4_moe_mtp.py (one decoder layer per MTP layer, numbered after the target's). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from deskside.planner.bounds import (
    MAX_DRAFT_LAYERS,
    MAX_EXPERTS,
    MAX_INDEX,
    MAX_INTERMEDIATE,
    MAX_SHARED_EXPERTS,
)
from deskside.planner.families.attention_fields import attention_layers, head_shape
from deskside.planner.families.config_values import flag, integer
from deskside.planner.families.decoder_params import decoder_params
from deskside.planner.families.hf_config import common_fields, weights_format
from deskside.planner.types import ModelArch, MoEShape


def read_glm4_moe(cfg: Mapping[str, Any]) -> ModelArch:
    c = common_fields(cfg)
    hidden, n_layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv_heads, head_dim = head_shape(cfg, hidden, heads)
    n_mtp = integer(cfg, "num_nextn_predict_layers", 0, MAX_DRAFT_LAYERS, 0)
    layers = attention_layers(["full"] * n_layers, kv_heads, head_dim, None, None)
    layers += attention_layers(["full"] * n_mtp, kv_heads, head_dim, None, None, n_layers, True)

    inter = integer(cfg, "intermediate_size", 1, MAX_INTERMEDIATE)
    n_experts = integer(cfg, "n_routed_experts", 0, MAX_EXPERTS, 0)
    first_dense = integer(cfg, "first_k_dense_replace", 0, MAX_INDEX, 0)
    moe_layers = max(0, n_layers - first_dense) if n_experts else 0
    e_inter = integer(cfg, "moe_intermediate_size", 1, MAX_INTERMEDIATE, inter)
    n_shared = integer(cfg, "n_shared_experts", 0, MAX_SHARED_EXPERTS, 0)
    topk = (
        integer(cfg, "num_experts_per_tok", 1, n_experts, 1, note="n_routed_experts")
        if n_experts
        else 0
    )
    q_kv = (heads + 2 * kv_heads) * head_dim
    attn_one = hidden * q_kv + heads * head_dim * hidden
    attn_one += q_kv if flag(cfg, "attention_bias", False) else 0
    attn_one += 2 * head_dim if flag(cfg, "use_qk_norm", False) else 0
    expert_one = 3 * hidden * e_inter
    router_one = hidden * n_experts + n_experts  # gate and e_score_correction_bias
    # One MTP layer: a MoE decoder layer, eh_proj (2h -> h), enorm, hnorm and the shared
    # head's norm; it shares the embeddings and the head with the target model.
    mtp_layer = attn_one + n_shared * expert_one + router_one + 2 * hidden * hidden + 5 * hidden
    moe = MoEShape(n_experts, n_shared, topk, e_inter, moe_layers) if n_experts else None
    params = replace(
        decoder_params(cfg, c, attn_one, inter, moe),
        router=moe_layers * router_one,
        draft_layer=mtp_layer,
        draft_layer_experts=n_experts * expert_one,
    )
    active = params.total - params.experts + moe_layers * topk * expert_one
    return ModelArch(
        family="glm4_moe",
        layers=layers,
        params=params,
        active_params=active,
        weights_format=weights_format(cfg, c["dtype"]),
        moe=moe,
        num_mtp_layers=n_mtp,
        **c,
    )

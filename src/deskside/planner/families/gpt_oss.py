"""gpt-oss (GptOssForCausalLM): grouped-query attention with a learned sink per head,
sliding-window and full layers alternating, every layer MoE, experts in MXFP4.

Read as vLLM 0.32's gpt_oss.py builds it: OAIAttention._build_attention gives the even
layers config.sliding_window and the odd ones none (they then take the model-level window
only if every layer_types entry slides, EngineArgs.create_engine_config); the sinks are
weights, not cache (the KV spec is the plain Attention one). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskside.planner.bounds import MAX_EXPERTS, MAX_INTERMEDIATE, MAX_POSITIONS
from deskside.planner.families.attention_fields import given_layer_types, head_shape
from deskside.planner.families.config_values import flag, integer
from deskside.planner.families.hf_config import common_fields, weights_format
from deskside.planner.types import AttentionLayer, ModelArch, MoEShape, ParamCounts


def read_gpt_oss(cfg: Mapping[str, Any]) -> ModelArch:
    c = common_fields(cfg)
    hidden, n_layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv_heads, head_dim = head_shape(cfg, hidden, heads)
    window = integer(cfg, "sliding_window", 0, MAX_POSITIONS, None) or None
    kinds = given_layer_types(cfg, n_layers)
    # the cache-level window reaches the odd layers only when every layer slides
    odd_window = window if kinds is not None and all(k == "sliding" for k in kinds) else None

    def layer(i: int) -> AttentionLayer:
        w = window if i % 2 == 0 else odd_window  # OAIAttention._build_attention
        if w:
            return AttentionLayer(i, "sliding", kv_heads, head_dim, head_dim, sliding_window=w)
        return AttentionLayer(i, "full", kv_heads, head_dim, head_dim)

    # MLPBlock: num_local_experts experts of intermediate_size, top num_experts_per_tok
    # (GptOssConfig.attribute_map: num_experts names num_local_experts)
    n_experts = integer(cfg, "num_local_experts", 1, MAX_EXPERTS, None)
    if n_experts is None:
        n_experts = integer(cfg, "num_experts", 1, MAX_EXPERTS)
    topk = integer(cfg, "num_experts_per_tok", 1, n_experts, 4, note="num_local_experts")
    inter = integer(cfg, "intermediate_size", 1, MAX_INTERMEDIATE)
    q_kv = (heads + 2 * kv_heads) * head_dim
    # qkv_proj and o_proj with biases, one sink per head
    attn_one = hidden * q_kv + q_kv + heads * head_dim * hidden + hidden + heads
    # one expert: gate_up (2 x inter) and down, each with a bias (has_bias=True)
    expert_one = hidden * 2 * inter + 2 * inter + inter * hidden + hidden
    embed = c["vocab_size"] * hidden
    params = ParamCounts(
        embedding=embed,
        lm_head=0 if flag(cfg, "tie_word_embeddings", False) else embed,
        attention=n_layers * attn_one,
        dense_mlp=0,
        experts=n_layers * n_experts * expert_one,
        shared_experts=0,
        router=n_layers * (hidden * n_experts + n_experts),  # GateLinear with a bias
        norms=(2 * n_layers + 1) * hidden,
    )
    active = params.total - params.experts + n_layers * topk * expert_one
    return ModelArch(
        family="gpt_oss",
        layers=tuple(layer(i) for i in range(n_layers)),
        params=params,
        active_params=active,
        weights_format=weights_format(cfg, c["dtype"]),
        moe=MoEShape(n_experts, 0, topk, inter, n_layers),
        **c,
    )

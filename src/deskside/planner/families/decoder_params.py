"""Parameter counts of a decoder whose layers are each attention and either a gated dense
MLP or a MoE block (routed experts, shared experts, a router), as vLLM's Llama-style
decoder layers build them (Llama 4, GLM-4.5 and the models read by their fields). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskside.planner.families.config_values import flag
from deskside.planner.types import ParamCounts


def decoder_params(
    cfg: Mapping[str, Any],
    *,
    vocab_size: int,
    hidden: int,
    n_layers: int,
    attn_one: int,
    inter: int,
    moe_layers: int,
    n_experts: int,
    topk: int,
    expert_one: int,
    shared_one: int,
    router_one: int,
    draft_layer: int = 0,
    draft_layer_experts: int = 0,
) -> tuple[ParamCounts, int]:
    """The parameters of `n_layers` layers of attention (`attn_one` each) and a gated MLP
    of `inter` (3 x hidden x inter), except `moe_layers` of them that take `n_experts`
    routed experts (`expert_one` each), shared experts (`shared_one`) and a router
    (`router_one`) instead; the embeddings, a head unless tie_word_embeddings, two norms a
    layer and a final one. Also the active parameters: `topk` experts per MoE layer."""
    embed = vocab_size * hidden
    params = ParamCounts(
        embedding=embed,
        lm_head=0 if flag(cfg, "tie_word_embeddings", False) else embed,
        attention=n_layers * attn_one,
        dense_mlp=(n_layers - moe_layers) * 3 * hidden * inter,
        experts=moe_layers * n_experts * expert_one,
        shared_experts=moe_layers * shared_one,
        router=moe_layers * router_one,
        norms=(2 * n_layers + 1) * hidden,
        draft_layer=draft_layer,
        draft_layer_experts=draft_layer_experts,
    )
    return params, params.total - params.experts + moe_layers * topk * expert_one

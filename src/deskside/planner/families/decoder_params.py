"""Parameter counts of a decoder whose layers are each attention and either a gated dense
MLP or a MoE block (routed experts, shared experts, a router), as vLLM's Llama-style
decoder layers build them (Llama 4, GLM-4.5 and the models read by their fields). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskside.planner.families.config_values import flag
from deskside.planner.types import MoEShape, ParamCounts


def decoder_params(
    cfg: Mapping[str, Any], c: Mapping[str, Any], attn_one: int, inter: int, moe: MoEShape | None
) -> ParamCounts:
    """The parameters of a model's layers (`c`: its common fields): each attention
    (`attn_one`) and a gated MLP of `inter` (3 x hidden x inter), except `moe`'s MoE
    layers, which take its routed experts and shared experts (gated MLPs of its expert
    size) and a gate of hidden x experts instead; the embeddings, a head unless
    tie_word_embeddings, two norms a layer and a final one."""
    hidden, n_layers = c["hidden_size"], c["num_hidden_layers"]
    moe = moe or MoEShape(0, 0, 0, 0, 0)  # no MoE layer
    layers, experts = moe.num_moe_layers, moe.num_experts
    expert_one = 3 * hidden * moe.expert_intermediate_size
    embed = c["vocab_size"] * hidden
    return ParamCounts(
        embedding=embed,
        lm_head=0 if flag(cfg, "tie_word_embeddings", False) else embed,
        attention=n_layers * attn_one,
        dense_mlp=(n_layers - layers) * 3 * hidden * inter,
        experts=layers * experts * expert_one,
        shared_experts=layers * moe.num_shared_experts * expert_one,
        router=layers * hidden * experts,
        norms=(2 * n_layers + 1) * hidden,
    )

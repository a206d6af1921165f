"""Llama 4 (Llama4ForConditionalGeneration with its text_config, Llama4ForCausalLM):
chunked local attention on the RoPE layers and full attention on the NoPE ones, MoE every
interleave_moe_layer_step-th layer with one shared expert.

Read as vLLM 0.32's llama4.py builds it: Llama4Attention uses ChunkedLocalAttention
(ChunkedLocalAttentionSpec) when the layer has RoPE (no_rope_layers[i] != 0) and
attention_chunk_size is set, plain Attention otherwise; Llama4DecoderLayer is MoE when
interleave_moe_layer_step > 0 and (i + 1) % step == 0 (Llama4MoE: num_local_experts
routed experts of intermediate_size plus a shared one), a dense MLP of
intermediate_size_mlp otherwise. transformers fills no_rope_layers with every
no_rope_layer_interval-th layer NoPE (Llama4TextConfig.__post_init__). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskside.planner.bounds import (
    MAX_EXPERTS,
    MAX_INTERMEDIATE,
    MAX_LAYERS,
    MAX_POSITIONS,
)
from deskside.planner.families.attention_fields import (
    attention_layers,
    chunked_unless_nope,
    head_shape,
)
from deskside.planner.families.config_values import integer, items
from deskside.planner.families.decoder_params import decoder_params
from deskside.planner.families.hf_config import common_fields, weights_format
from deskside.planner.types import ModelArch, MoEShape


def read_llama4(cfg: Mapping[str, Any]) -> ModelArch:
    c = common_fields(cfg)
    hidden, n_layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv_heads, head_dim = head_shape(cfg, hidden, heads)
    chunk = integer(cfg, "attention_chunk_size", 1, MAX_POSITIONS, None)
    no_rope = items(cfg, "no_rope_layers", 0, "one per layer")
    if not no_rope:  # Llama4TextConfig.__post_init__: an empty list takes the default
        interval = integer(cfg, "no_rope_layer_interval", 1, MAX_LAYERS, 4)
        no_rope = [int((i + 1) % interval != 0) for i in range(n_layers)]
    elif len(no_rope) < n_layers:
        items(cfg, "no_rope_layers", n_layers, "one per layer: num_hidden_layers")
    kinds = chunked_unless_nope(no_rope, n_layers)
    layers = attention_layers(kinds, kv_heads, head_dim, None, chunk)

    n_experts = integer(cfg, "num_local_experts", 1, MAX_EXPERTS, 16)
    topk = integer(cfg, "num_experts_per_tok", 1, n_experts, 1, note="num_local_experts")
    e_inter = integer(cfg, "intermediate_size", 1, MAX_INTERMEDIATE)
    inter = integer(cfg, "intermediate_size_mlp", 1, MAX_INTERMEDIATE, 16384)
    step = integer(cfg, "interleave_moe_layer_step", 0, MAX_LAYERS, 1)
    moe_layers = sum(1 for i in range(n_layers) if step > 0 and (i + 1) % step == 0)
    attn_one = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden
    # one shared expert of the routed experts' size
    moe = MoEShape(n_experts, 1, topk, e_inter, moe_layers) if moe_layers else None
    params = decoder_params(cfg, c, attn_one, inter, moe)
    active = params.total - params.experts + moe_layers * topk * 3 * hidden * e_inter
    chunked = sum(1 for la in layers if la.kind == "chunked")
    notes = (
        (
            f"Llama 4: {chunked} of {n_layers} layers attend within chunks of {chunk} tokens "
            "(vLLM's ChunkedLocalAttentionSpec: a request holds one chunk plus the tokens in "
            "flight); the NoPE layers (no_rope_layers 0) attend to the whole context",
        )
        if chunk
        else ()
    )
    return ModelArch(
        family="llama4",
        layers=layers,
        params=params,
        active_params=active,
        weights_format=weights_format(cfg, c["dtype"]),
        moe=moe,
        notes=notes,
        **c,
    )

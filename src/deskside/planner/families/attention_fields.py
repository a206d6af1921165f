"""The attention of a grouped-query model, read from the config fields vLLM's attention
layers read (whatever the model type): the head shape (num_attention_heads,
num_key_value_heads, head_dim) and which layers are full, sliding-window or chunked-local
(layer_types, sliding_window, sliding_window_pattern, attention_chunk_size,
no_rope_layers). Pure: takes the parsed JSON."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deskside.planner.bounds import MAX_HEAD_DIM, MAX_LAYERS, MAX_POSITIONS
from deskside.planner.families.config_values import (
    ConfigValueError,
    divisible,
    entry_in,
    integer,
    items,
    positive_quotient,
    show,
)
from deskside.planner.types import AttentionLayer

# layer_types entries and the cache vLLM gives each. "attention" is full attention in
# some configs (ModelConfig.is_hybrid reads both spellings).
LAYER_KINDS: dict[str, str] = {
    "full_attention": "full",
    "attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
}
# layer_types entries of layers that keep a recurrent state instead of (or beside) a KV
# cache: vLLM sizes them with MambaSpec, which these readers do not plan.
STATE_KINDS = ("linear_attention", "mamba", "mamba2", "conv", "recurrent", "gated_delta_net")


def head_shape(cfg: Mapping[str, Any], hidden: int, heads: int) -> tuple[int, int]:
    """(num_key_value_heads, head_dim) as vLLM's attention layers take them: KV heads
    default to the attention heads, head_dim to hidden_size / num_attention_heads."""
    kv_heads = integer(cfg, "num_key_value_heads", 1, heads, heads, note="num_attention_heads")
    # Attention.__init__: num_heads % num_kv_heads == 0 (each KV head serves a group)
    divisible("num_attention_heads", heads, "num_key_value_heads", kv_heads)
    head_dim = integer(cfg, "head_dim", 1, MAX_HEAD_DIM, None)
    if head_dim is None:
        head_dim = positive_quotient("hidden_size", hidden, "num_attention_heads", heads)
        if head_dim > MAX_HEAD_DIM:
            raise ConfigValueError(
                "hidden_size",
                f"/ num_attention_heads is {head_dim}; expected a head size of at most "
                f"{MAX_HEAD_DIM} (or set head_dim)",
            )
    return kv_heads, head_dim


def given_layer_types(cfg: Mapping[str, Any], n_layers: int) -> list[str] | None:
    """config.json's layer_types, one cache kind per layer (full, sliding, chunked), or
    None without them. A state-keeping layer kind is refused, naming it."""
    given = items(cfg, "layer_types", n_layers, "one per layer: num_hidden_layers")
    if given is None:
        return None
    kinds = []
    for i, value in enumerate(given[:n_layers]):
        if isinstance(value, str) and value in STATE_KINDS:
            raise ConfigValueError(
                f"layer_types[{i}]",
                f"is {show(value)}: a layer that keeps a recurrent state, which vLLM caches "
                "with its Mamba state spec beside the attention layers; deskside does not "
                "plan that kind of layer for this model",
            )
        kinds.append(LAYER_KINDS[str(entry_in("layer_types", i, value, list(LAYER_KINDS)))])
    return kinds


def layer_kinds_by_fields(cfg: Mapping[str, Any], n_layers: int) -> tuple[list[str], str]:
    """Which layers are full, sliding or chunked, from whichever fields the config has,
    and a note of the field that decided it:

    - layer_types, per layer (transformers writes it for hybrid models; vLLM's model code
      and the Transformers backend follow it);
    - attention_chunk_size: every layer chunked except the global (no-RoPE) ones of
      no_rope_layers (0 = global, as Llama4Attention reads it);
    - sliding_window with sliding_window_pattern: every pattern-th layer full, the others
      sliding (Gemma 3's rule);
    - sliding_window alone: every layer slides (EngineArgs.create_engine_config sets the
      model-level window when no layer_types exist);
    - none of them: full attention.
    """
    kinds = given_layer_types(cfg, n_layers)
    if kinds is not None:
        return kinds, "layer_types"
    if integer(cfg, "attention_chunk_size", 1, MAX_POSITIONS, None):
        no_rope = items(cfg, "no_rope_layers", n_layers, "one per layer: num_hidden_layers")
        if no_rope is None:
            return ["chunked"] * n_layers, "attention_chunk_size"
        return chunked_unless_nope(no_rope, n_layers), "attention_chunk_size, no_rope_layers"
    if integer(cfg, "sliding_window", 0, MAX_POSITIONS, None):
        pattern = integer(cfg, "sliding_window_pattern", 1, MAX_LAYERS, None)
        if pattern is not None:
            kinds = ["sliding" if (i + 1) % pattern else "full" for i in range(n_layers)]
            return kinds, "sliding_window, sliding_window_pattern"
        return ["sliding"] * n_layers, "sliding_window"
    return ["full"] * n_layers, "no window fields"


def chunked_unless_nope(no_rope: Sequence[Any], n_layers: int) -> list[str]:
    """Llama4Attention: a layer whose no_rope_layers entry is 0 is global (full attention);
    the others are chunked when attention_chunk_size is set."""
    return [
        "full" if entry_in("no_rope_layers", i, v, [0, 1]) == 0 else "chunked"
        for i, v in enumerate(no_rope[:n_layers])
    ]


def attention_layers(
    kinds: Sequence[str],
    kv_heads: int,
    head_dim: int,
    window: int | None,
    chunk: int | None,
    first_index: int = 0,
    draft: bool = False,
) -> tuple[AttentionLayer, ...]:
    """One AttentionLayer per kind; a sliding layer without a window, or a chunked one
    without a chunk size, is full attention (vLLM passes no window, no chunk)."""

    def layer(i: int, kind: str) -> AttentionLayer:
        if kind == "sliding" and window:
            return AttentionLayer(
                first_index + i,
                "sliding",
                kv_heads,
                head_dim,
                head_dim,
                sliding_window=window,
                is_draft=draft,
            )
        if kind == "chunked" and chunk:
            return AttentionLayer(
                first_index + i,
                "chunked",
                kv_heads,
                head_dim,
                head_dim,
                attention_chunk_size=chunk,
                is_draft=draft,
            )
        return AttentionLayer(first_index + i, "full", kv_heads, head_dim, head_dim, is_draft=draft)

    return tuple(layer(i, k) for i, k in enumerate(kinds))

"""The weights of the Qwen3-VL vision tower, which vLLM 0.32 builds for Qwen3-VL,
Qwen3-VL-MoE, Qwen3.5 and Qwen3.5-MoE alike (qwen3_vl.py's Qwen3_VisionTransformer; the
qwen3_5.py and qwen3_vl_moe.py wrappers construct the same class): a Conv3d patch
embedding, learned positions, the blocks, the patch merger and one deepstack merger per
deepstack_visual_indexes entry. Pure: takes the parsed vision_config."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deskside.planner.bounds import MAX_HEADS, MAX_HIDDEN, MAX_INTERMEDIATE, MAX_LAYERS
from deskside.planner.families.config_values import (
    ConfigValueError,
    as_int,
    divisible,
    items,
    sub_config_reader,
)

# Qwen3VLVisionConfig's (and Qwen3_5VisionConfig's) defaults in transformers, for keys a
# vision_config leaves out
QWEN3_VISION_DEFAULTS = {
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "depth": 27,
    "num_heads": 16,
    "in_channels": 3,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "out_hidden_size": 3584,
    "num_position_embeddings": 2304,
}
# Qwen3VLVisionConfig's deepstack_visual_indexes; Qwen3_5VisionConfig has no such field,
# so vLLM builds no deepstack merger unless the file names some
QWEN3_VL_DEEPSTACK = (8, 16, 24)
MAX_PATCHES = 1 << 24  # num_position_embeddings
MAX_PATCH = 1 << 12  # patch_size and temporal_patch_size, in pixels and frames
MAX_MERGE = 64  # spatial_merge_size
MAX_CHANNELS = 16


def _deepstack(vision: Mapping[str, Any], default: Sequence[int]) -> int:
    """How many deepstack mergers vLLM builds: one per deepstack_visual_indexes entry."""
    key = "vision_config.deepstack_visual_indexes"
    listed = items(vision, "deepstack_visual_indexes", 0, "", prefix="vision_config.")
    if listed is None:
        return len(default)
    if len(listed) > MAX_LAYERS:
        raise ConfigValueError(key, f"has {len(listed)} entries; expected at most {MAX_LAYERS}")
    for i, entry in enumerate(listed):
        as_int(f"{key}[{i}]", entry)
    return len(listed)


def _qwen3_vision_params(vision: Mapping[str, Any], deepstack_default: Sequence[int]) -> int:
    # Qwen3_VisionTransformer.__init__ (qwen3_vl.py), unquantized
    get = sub_config_reader(vision, QWEN3_VISION_DEFAULTS, "vision_config.")

    hidden = get("hidden_size", MAX_HIDDEN)
    inter = get("intermediate_size", MAX_INTERMEDIATE)
    depth = get("depth", MAX_LAYERS)
    heads = get("num_heads", MAX_HEADS)
    channels = get("in_channels", MAX_CHANNELS)
    patch, frames = get("patch_size", MAX_PATCH), get("temporal_patch_size", MAX_PATCH)
    merge = get("spatial_merge_size", MAX_MERGE)
    out = get("out_hidden_size", MAX_HIDDEN)
    positions = get("num_position_embeddings", MAX_PATCHES)
    deepstack = _deepstack(vision, deepstack_default)
    # Qwen2_5_VisionAttention: dist_utils.divide(hidden_size, num_heads)
    divisible("vision_config.hidden_size", hidden, "vision_config.num_heads", heads)
    # Qwen3_VisionBlock: norm1, norm2 (LayerNorms), qkv and proj with biases, Qwen3_VisionMLP
    # with biases
    block = 4 * hidden + 3 * hidden * hidden + 3 * hidden + hidden * hidden + hidden
    block += 2 * hidden * inter + inter + hidden
    # Qwen3_VisionPatchEmbed (a Conv3d with bias) and pos_embed (an Embedding)
    embeddings = channels * frames * patch * patch * hidden + hidden + positions * hidden
    # Qwen3_VisionPatchMerger: linear_fc1 (merged x merged) and linear_fc2 (merged x
    # out_hidden_size), both with biases, after a LayerNorm of hidden_size (of the merged
    # width in the deepstack mergers: use_postshuffle_norm)
    merged = hidden * merge * merge
    linears = merged * merged + merged + merged * out + out
    merger = 2 * hidden + linears
    deepstack_merger = 2 * merged + linears
    return depth * block + embeddings + merger + deepstack * deepstack_merger


def qwen3_vl_vision_params(
    vision: Mapping[str, Any], text_hidden: int, outer: Mapping[str, Any] | None = None
) -> int:
    """Qwen3-VL and Qwen3-VL-MoE: deepstack mergers at [8, 16, 24] unless the file says."""
    return _qwen3_vision_params(vision, QWEN3_VL_DEEPSTACK)


def qwen3_5_vision_params(
    vision: Mapping[str, Any], text_hidden: int, outer: Mapping[str, Any] | None = None
) -> int:
    """Qwen3.5 and Qwen3.5-MoE: no deepstack merger unless the file lists indexes."""
    return _qwen3_vision_params(vision, ())

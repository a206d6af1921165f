"""The weights of Llama 4's vision tower as vLLM 0.32's mllama4.py builds it: the
Llama4VisionModel (an unfold-and-linear patch embedding, a class embedding, learned
positions, pre and post LayerNorms, the encoder layers and the pixel-shuffle MLP adapter)
and the Llama4MultiModalProjector. Pure: takes the parsed vision_config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskside.planner.bounds import MAX_HEADS, MAX_HIDDEN, MAX_INTERMEDIATE, MAX_LAYERS
from deskside.planner.families.config_values import (
    ConfigValueError,
    flag,
    positive_quotient,
    sub_config_reader,
)

# Llama4VisionConfig's defaults (transformers), for keys a vision_config leaves out
LLAMA4_VISION_DEFAULTS = {
    "hidden_size": 768,
    "intermediate_size": 5632,
    "num_hidden_layers": 34,
    "num_attention_heads": 16,
    "num_channels": 3,
    "image_size": 448,
    "patch_size": 14,
    "vision_output_dim": 7680,
    "projector_input_dim": 4096,
    "projector_output_dim": 4096,
}
MAX_PATCHES = 1 << 24  # image tiles of more patches than this are no published tower's
MAX_IMAGE = 1 << 16  # image_size and patch_size, in pixels
MAX_CHANNELS = 16


def llama4_vision_params(
    vision: Mapping[str, Any], text_hidden: int, outer: Mapping[str, Any] | None = None
) -> int:
    """Llama4VisionModel and Llama4MultiModalProjector (mllama4.py), unquantized."""

    get = sub_config_reader(vision, LLAMA4_VISION_DEFAULTS, "vision_config.")

    hidden = get("hidden_size", MAX_HIDDEN)
    inter = get("intermediate_size", MAX_INTERMEDIATE)
    layers = get("num_hidden_layers", MAX_LAYERS)
    heads = get("num_attention_heads", MAX_HEADS)
    channels = get("num_channels", MAX_CHANNELS)
    image, patch = get("image_size", MAX_IMAGE), get("patch_size", MAX_IMAGE)
    output = get("vision_output_dim", MAX_HIDDEN)
    proj_in = get("projector_input_dim", MAX_INTERMEDIATE)
    proj_out = get("projector_output_dim", MAX_HIDDEN)
    bias = flag(vision, "multi_modal_projector_bias", False, prefix="vision_config.")
    head_dim = positive_quotient(
        "vision_config.hidden_size", hidden, "vision_config.num_attention_heads", heads
    )
    # Llama4VisionModel.num_patches: a tile's patches and the class token
    positions = (image // patch) ** 2 + 1
    if positions > MAX_PATCHES:
        raise ConfigValueError(
            "vision_config.image_size", f"/ patch_size gives {positions} patches; too many"
        )
    attn = heads * head_dim
    # Llama4VisionEncoderLayer: qkv_proj and o_proj with biases, fc1 and fc2 with biases,
    # two LayerNorms
    layer = hidden * 3 * attn + 3 * attn + attn * hidden + hidden
    layer += 2 * hidden * inter + inter + hidden + 4 * hidden
    # Llama4UnfoldConvolution (a linear without bias), class_embedding,
    # positional_embedding_vlm, layernorm_pre and layernorm_post
    embeddings = channels * patch * patch * hidden + hidden + positions * hidden + 4 * hidden
    # Llama4VisionPixelShuffleMLP: fc1 takes intermediate_size, biases only with
    # multi_modal_projector_bias
    adapter = inter * proj_in + proj_in * proj_out + (proj_in + proj_out if bias else 0)
    # Llama4MultiModalProjector.linear_1: vision_output_dim x the text hidden size, no bias
    projector = output * text_hidden
    return layers * layer + embeddings + adapter + projector

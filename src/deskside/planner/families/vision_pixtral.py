"""The weights of Mistral 3's vision tower as vLLM 0.32's mistral3.py builds it for a
Hugging Face checkpoint (Mistral3ForConditionalGeneration): the PixtralHFVisionModel
(pixtral.py; a Conv2d patch embedding without bias, an RMSNorm and the transformer layers,
only up to the deepest vision_feature_layer) and the Mistral3MultiModalProjector (an
RMSNorm, the patch merger and two linears). The projector's keys are the wrapper's own
(spatial_merge_size, multimodal_projector_bias, vision_feature_layer). Pure: takes the
parsed JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskside.planner.bounds import MAX_HEADS, MAX_HIDDEN, MAX_INTERMEDIATE, MAX_LAYERS
from deskside.planner.families.config_values import (
    ConfigValueError,
    as_int,
    divisible,
    flag,
    integer,
    sub_config_reader,
)

# PixtralVisionConfig's defaults (transformers), for keys a vision_config leaves out
PIXTRAL_DEFAULTS = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_channels": 3,
    "patch_size": 16,
}
# Mistral3Config's vision_config when the file has none (transformers)
MISTRAL3_DEFAULT_VISION = {
    "intermediate_size": 4096,
    "hidden_size": 1024,
    "patch_size": 14,
    "image_size": 1540,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
}
MAX_PATCH = 1 << 12  # patch_size, in pixels
MAX_MERGE = 64  # spatial_merge_size
MAX_CHANNELS = 16


def _layers_built(outer: Mapping[str, Any], layers: int) -> int:
    """mistral3.py _get_num_hidden_layers: the tower is built up to the deepest
    vision_feature_layer (utils.get_layer_index: a negative index counts from the end,
    -1 being the last layer); more layers than the tower has is refused, as vLLM does."""
    key = "vision_feature_layer"
    value = outer.get(key)
    listed = value if isinstance(value, list) else [-1 if value is None else value]
    if not listed:
        raise ConfigValueError(key, "is an empty list; expected a layer index or a list of them")
    built = []
    for i, entry in enumerate(listed):
        name = f"{key}[{i}]" if isinstance(value, list) else key
        index = as_int(name, entry)
        if not -MAX_LAYERS - 1 <= index <= MAX_LAYERS:
            raise ConfigValueError(name, f"is {index}; expected a layer index of the tower")
        built.append(layers + index + 1 if index < 0 else index)
    deepest = max(built)
    if deepest > layers:
        raise ConfigValueError(
            key,
            f"needs {deepest} layers; vision_config.num_hidden_layers is {layers}",
            hint="vLLM refuses a feature layer deeper than the vision tower",
        )
    return max(deepest, 0)  # a negative count builds no layer (range() of it is empty)


def mistral3_vision_params(
    vision: Mapping[str, Any], text_hidden: int, outer: Mapping[str, Any] | None = None
) -> int:
    """PixtralHFVisionModel (init_vision_tower_for_mistral3) and
    Mistral3MultiModalProjector (mistral3.py), unquantized."""
    outer = outer or {}

    get = sub_config_reader(vision, PIXTRAL_DEFAULTS, "vision_config.")

    hidden = get("hidden_size", MAX_HIDDEN)
    inter = get("intermediate_size", MAX_INTERMEDIATE)
    heads = get("num_attention_heads", MAX_HEADS)
    channels = get("num_channels", MAX_CHANNELS)
    patch = get("patch_size", MAX_PATCH)
    layers = _layers_built(outer, get("num_hidden_layers", MAX_LAYERS))
    merge = int(integer(outer, "spatial_merge_size", 1, MAX_MERGE, 2))
    bias = flag(outer, "multimodal_projector_bias", False)
    # PixtralHFAttention: hidden_size must split evenly over the heads
    divisible("vision_config.hidden_size", hidden, "vision_config.num_attention_heads", heads)
    # PixtralHFTransformerBlock: attention_norm and ffn_norm (RMSNorms), qkv_proj and
    # o_proj without biases, PixtralHFMLP (gate_up_proj, down_proj) without biases
    layer = 2 * hidden + 4 * hidden * hidden + 3 * hidden * inter
    # patch_conv (no bias) and ln_pre; no post-norm (require_post_norm=False)
    tower = channels * patch * patch * hidden + hidden + layers * layer
    # Mistral3MultiModalProjector: norm, patch_merger.merging_layer (no bias), linear_1
    # and linear_2 (biases with multimodal_projector_bias)
    projector = hidden + hidden * merge * merge * hidden
    projector += hidden * text_hidden + text_hidden * text_hidden
    projector += 2 * text_hidden if bias else 0
    return tower + projector

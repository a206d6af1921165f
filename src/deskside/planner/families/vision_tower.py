"""The weights of a multimodal model's vision tower, which vLLM loads beside the language
model (on every pipeline stage, split over tensor parallel; skipped only when
--limit-mm-per-prompt allows no images: SupportsMultiModal._mark_tower_model). Counted
for the wrappers whose tower deskside reads: Gemma 3 (SigLIP, SiglipVisionModel, and
Gemma3MultiModalProjector), Llama 4 (families.vision_llama4), Qwen3-VL and Qwen3.5
(families.vision_qwen). Pure: takes the parsed JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskside.planner.bounds import MAX_HIDDEN, MAX_INTERMEDIATE, MAX_LAYERS, MAX_POSITIONS
from deskside.planner.families.config_values import ConfigValueError, integer, mapping
from deskside.planner.families.vision_llama4 import llama4_vision_params
from deskside.planner.families.vision_qwen import qwen3_5_vision_params, qwen3_vl_vision_params

# SiglipVisionConfig's defaults (transformers), for keys a vision_config leaves out
SIGLIP_DEFAULTS = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_channels": 3,
    "image_size": 224,
    "patch_size": 16,
}
MAX_PATCHES = 1 << 24


def siglip_params(vision: Mapping[str, Any], text_hidden: int) -> int:
    """SiglipVisionModel (no head: Gemma 3 sets vision_use_head false) and
    Gemma3MultiModalProjector (a vision x text projection and an RMSNorm)."""

    def get(key: str, hi: int) -> int:
        value = integer(vision, key, 1, hi, SIGLIP_DEFAULTS[key], prefix="vision_config.")
        return int(value)

    hidden = get("hidden_size", MAX_HIDDEN)
    inter = get("intermediate_size", MAX_INTERMEDIATE)
    layers = get("num_hidden_layers", MAX_LAYERS)
    channels = get("num_channels", 16)
    image, patch = get("image_size", MAX_POSITIONS), get("patch_size", MAX_POSITIONS)
    positions = (image // patch) ** 2
    if positions > MAX_PATCHES:
        raise ConfigValueError(
            "vision_config.image_size", f"/ patch_size gives {positions} patches; too many"
        )
    # per layer: q, k, v, o with biases; fc1, fc2 with biases; two LayerNorms
    layer = 4 * (hidden * hidden + hidden) + 2 * hidden * inter + inter + hidden + 4 * hidden
    embeddings = channels * patch * patch * hidden + hidden + positions * hidden
    post_norm = 2 * hidden
    projector = hidden * text_hidden + hidden
    return layers * layer + embeddings + post_norm + projector


# architectures[0] -> how its vision tower is read
TOWERS = {
    "Gemma3ForConditionalGeneration": siglip_params,
    "Llama4ForConditionalGeneration": llama4_vision_params,
    "Qwen3VLForConditionalGeneration": qwen3_vl_vision_params,
    "Qwen3VLMoeForConditionalGeneration": qwen3_vl_vision_params,
    "Qwen3_5ForConditionalGeneration": qwen3_5_vision_params,
    "Qwen3_5MoeForConditionalGeneration": qwen3_5_vision_params,
}


def vision_tower_params(cfg: Mapping[str, Any], text_hidden: int) -> int | None:
    """Parameters of the vision tower of a multimodal config.json (the outer one): 0 when
    it has no vision_config, None when it has one deskside does not read."""
    vision = mapping(cfg, "vision_config")
    if vision is None:
        return 0
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    read = TOWERS.get(arch) if isinstance(arch, str) else None
    return None if read is None else read(vision, text_hidden)

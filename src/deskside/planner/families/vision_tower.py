"""The weights of a multimodal model's vision tower, which vLLM loads beside the language
model (on every pipeline stage, split over tensor parallel; skipped only when
--limit-mm-per-prompt allows no images: SupportsMultiModal._mark_tower_model). Counted
for the wrappers whose tower deskside reads: Gemma 3 (SigLIP, SiglipVisionModel, and
Gemma3MultiModalProjector), Llama 4 (families.vision_llama4), Qwen3-VL, Qwen3-VL-MoE,
Qwen3.5 and Qwen3.5-MoE (families.vision_qwen) and Mistral 3 (families.vision_pixtral).
Pure: takes the parsed JSON."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from deskside.planner.bounds import MAX_HIDDEN, MAX_INTERMEDIATE, MAX_LAYERS, MAX_POSITIONS
from deskside.planner.families.config_values import ConfigValueError, mapping, sub_config_reader
from deskside.planner.families.vision_llama4 import llama4_vision_params
from deskside.planner.families.vision_pixtral import (
    MISTRAL3_DEFAULT_VISION,
    mistral3_vision_params,
)
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


def siglip_params(
    vision: Mapping[str, Any], text_hidden: int, outer: Mapping[str, Any] | None = None
) -> int:
    """SiglipVisionModel (no head: Gemma 3 sets vision_use_head false) and
    Gemma3MultiModalProjector (a vision x text projection and an RMSNorm)."""

    get = sub_config_reader(vision, SIGLIP_DEFAULTS, "vision_config.")

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


# (vision_config, text hidden size, the whole config.json) -> parameters
TowerReader = Callable[[Mapping[str, Any], int, Mapping[str, Any]], int]

# architectures[0] -> how its vision tower is read
TOWERS: dict[str, TowerReader] = {
    "Gemma3ForConditionalGeneration": siglip_params,
    "Llama4ForConditionalGeneration": llama4_vision_params,
    "Qwen3VLForConditionalGeneration": qwen3_vl_vision_params,
    "Qwen3VLMoeForConditionalGeneration": qwen3_vl_vision_params,
    "Qwen3_5ForConditionalGeneration": qwen3_5_vision_params,
    "Qwen3_5MoeForConditionalGeneration": qwen3_5_vision_params,
    "Mistral3ForConditionalGeneration": mistral3_vision_params,
}
# the vision_config transformers' wrapper config gives a file without one (vLLM builds
# that tower too); Gemma 3's is not read that way (SiglipVisionConfig's default has a head)
DEFAULT_VISION: dict[str, Mapping[str, Any]] = {
    "Llama4ForConditionalGeneration": {},
    "Qwen3VLForConditionalGeneration": {},
    "Qwen3VLMoeForConditionalGeneration": {},
    "Qwen3_5ForConditionalGeneration": {},
    "Qwen3_5MoeForConditionalGeneration": {},
    "Mistral3ForConditionalGeneration": MISTRAL3_DEFAULT_VISION,
}


@dataclass(frozen=True)
class VisionTower:
    params: int
    defaulted: bool  # config.json has no vision_config: transformers' default tower


def vision_tower(cfg: Mapping[str, Any], text_hidden: int) -> VisionTower | None:
    """The vision tower of a multimodal config.json (the outer one): 0 parameters when it
    has none, None when it has one deskside does not read."""
    archs = cfg.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs else None
    read = TOWERS.get(arch) if isinstance(arch, str) else None
    vision = mapping(cfg, "vision_config")
    if vision is None:
        default = DEFAULT_VISION.get(arch) if isinstance(arch, str) else None
        if read is None or default is None:
            return VisionTower(0, defaulted=False)
        return VisionTower(read(default, text_hidden, cfg), defaulted=True)
    return None if read is None else VisionTower(read(vision, text_hidden, cfg), False)


def vision_tower_params(cfg: Mapping[str, Any], text_hidden: int) -> int | None:
    """Parameters of the vision tower of a multimodal config.json (the outer one): 0 when
    it has none, None when it has one deskside does not read."""
    tower = vision_tower(cfg, text_hidden)
    return None if tower is None else tower.params

"""Vision towers' configs with their parameter counts as vLLM 0.32 builds them: the unit
tests check deskside's formulas against `expected`; tests/e2e/test_vision_towers.py builds
each tower with vLLM's own classes on the meta device and checks the same numbers, so
they cannot drift from vLLM. Each `expected` was obtained that way (vLLM's module classes
on the meta device, summing `numel()` of their parameters).

The published ones are copied from the models' config.json as published on Hugging Face
(taken from public copies of those files)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TowerCase:
    name: str
    tower: str  # which vLLM build: llama4, qwen3_vl, qwen3_vl_moe, qwen3_5, qwen3_5_moe, mistral3
    architecture: str  # config.json architectures[0]
    vision: dict[str, Any] | None  # config.json vision_config (None: the file has none)
    text_hidden: int  # text_config.hidden_size
    expected: int
    outer: dict[str, Any] = field(default_factory=dict)  # the wrapper's own keys

    def config_json(self) -> dict[str, Any]:
        """The case as the outer config.json (without its text_config)."""
        cfg: dict[str, Any] = {"architectures": [self.architecture], **self.outer}
        if self.vision is not None:
            cfg["vision_config"] = self.vision
        return cfg


# meta-llama/Llama-4-Scout-17B-16E-Instruct (Maverick's is the same)
SCOUT_VISION: dict[str, Any] = {
    "attention_dropout": 0.0,
    "hidden_act": "gelu",
    "hidden_size": 1408,
    "image_size": 336,
    "initializer_range": 0.02,
    "intermediate_size": 5632,
    "model_type": "llama4_vision_model",
    "multi_modal_projector_bias": False,
    "norm_eps": 1e-05,
    "num_attention_heads": 16,
    "num_channels": 3,
    "num_hidden_layers": 34,
    "patch_size": 14,
    "pixel_shuffle_ratio": 0.5,
    "projector_dropout": 0.0,
    "projector_input_dim": 4096,
    "projector_output_dim": 4096,
    "rope_theta": 10000,
    "vision_feature_layer": -1,
    "vision_feature_select_strategy": "default",
    "vision_output_dim": 4096,
}
# Qwen/Qwen3.5-27B
QWEN3_5_27B_VISION: dict[str, Any] = {
    "deepstack_visual_indexes": [],
    "depth": 27,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 1152,
    "in_channels": 3,
    "initializer_range": 0.02,
    "intermediate_size": 4304,
    "model_type": "qwen3_5",
    "num_heads": 16,
    "num_position_embeddings": 2304,
    "out_hidden_size": 5120,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}
# Qwen/Qwen3-VL-4B-Instruct
QWEN3_VL_4B_VISION: dict[str, Any] = {
    "deepstack_visual_indexes": [5, 11, 17],
    "depth": 24,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 1024,
    "in_channels": 3,
    "initializer_range": 0.02,
    "intermediate_size": 4096,
    "model_type": "qwen3_vl",
    "num_heads": 16,
    "num_position_embeddings": 2304,
    "out_hidden_size": 2560,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}

# mistralai/Mistral-Small-3.1-24B-Instruct-2503
MISTRAL_SMALL_3_1_VISION: dict[str, Any] = {
    "attention_dropout": 0.0,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "image_size": 1540,
    "initializer_range": 0.02,
    "intermediate_size": 4096,
    "model_type": "pixtral",
    "num_attention_heads": 16,
    "num_channels": 3,
    "num_hidden_layers": 24,
    "patch_size": 14,
    "rope_theta": 10000.0,
}
MISTRAL_SMALL_3_1_OUTER: dict[str, Any] = {
    "multimodal_projector_bias": False,
    "projector_hidden_act": "gelu",
    "spatial_merge_size": 2,
    "vision_feature_layer": -1,
}

CASES: tuple[TowerCase, ...] = (
    TowerCase(
        "Llama-4-Scout",
        "llama4",
        "Llama4ForConditionalGeneration",
        SCOUT_VISION,
        5120,
        871_932_416,
    ),
    TowerCase(
        "Qwen3.5-27B",
        "qwen3_5",
        "Qwen3_5ForConditionalGeneration",
        QWEN3_5_27B_VISION,
        5120,
        460_730_096,
    ),
    TowerCase(
        "Qwen3-VL-4B",
        "qwen3_vl",
        "Qwen3VLForConditionalGeneration",
        QWEN3_VL_4B_VISION,
        2560,
        415_347_712,
    ),
    # small ones: every key the formulas read, projector biases, defaults
    TowerCase(
        "llama4-small-bias",
        "llama4",
        "Llama4ForConditionalGeneration",
        {
            "hidden_size": 96,
            "intermediate_size": 200,
            "num_hidden_layers": 3,
            "num_attention_heads": 6,
            "num_channels": 4,
            "image_size": 70,
            "patch_size": 7,
            "vision_output_dim": 48,
            "projector_input_dim": 40,
            "projector_output_dim": 48,
            "multi_modal_projector_bias": True,
            "rope_theta": 10000,
        },
        72,
        271_440,
    ),
    TowerCase(
        "llama4-defaults",
        "llama4",
        "Llama4ForConditionalGeneration",
        {},
        64,
        416_348_160,
    ),
    TowerCase(
        "qwen3_vl-default-deepstack",
        "qwen3_vl_moe",
        "Qwen3VLMoeForConditionalGeneration",
        {
            "hidden_size": 64,
            "intermediate_size": 100,
            "depth": 4,
            "num_heads": 4,
            "in_channels": 3,
            "patch_size": 4,
            "temporal_patch_size": 2,
            "spatial_merge_size": 2,
            "out_hidden_size": 80,
            "num_position_embeddings": 49,
        },
        80,
        475_856,
    ),
    TowerCase(
        "qwen3_5-listed-deepstack",
        "qwen3_5_moe",
        "Qwen3_5MoeForConditionalGeneration",
        {
            "hidden_size": 48,
            "intermediate_size": 72,
            "depth": 5,
            "num_heads": 3,
            "in_channels": 2,
            "patch_size": 3,
            "temporal_patch_size": 1,
            "spatial_merge_size": 3,
            "out_hidden_size": 40,
            "num_position_embeddings": 36,
            "deepstack_visual_indexes": [1, 3],
        },
        40,
        700_752,
    ),
    TowerCase(
        "qwen3_5-defaults",
        "qwen3_5",
        "Qwen3_5ForConditionalGeneration",
        {},
        3584,
        453_650_672,
    ),
    TowerCase(
        "Mistral-Small-3.1-24B",
        "mistral3",
        "Mistral3ForConditionalGeneration",
        MISTRAL_SMALL_3_1_VISION,
        5120,
        438_958_080,
        MISTRAL_SMALL_3_1_OUTER,
    ),
    TowerCase(
        "mistral3-small-bias-feature-layers",
        "mistral3",
        "Mistral3ForConditionalGeneration",
        {
            "hidden_size": 48,
            "intermediate_size": 100,
            "num_hidden_layers": 6,
            "num_attention_heads": 4,
            "num_channels": 2,
            "patch_size": 5,
        },
        40,
        121_680,
        {
            "multimodal_projector_bias": True,
            "spatial_merge_size": 3,
            "vision_feature_layer": [1, -3],
        },
    ),
    TowerCase(
        "mistral3-defaults", "mistral3", "Mistral3ForConditionalGeneration", {}, 64, 407_754_752
    ),
    # no vision_config: the wrapper config's default tower
    TowerCase("llama4-none", "llama4", "Llama4ForConditionalGeneration", None, 5120, 455_178_240),
    TowerCase(
        "qwen3_vl-none", "qwen3_vl", "Qwen3VLForConditionalGeneration", None, 2048, 566_949_104
    ),
    TowerCase(
        "qwen3_5_moe-none",
        "qwen3_5_moe",
        "Qwen3_5MoeForConditionalGeneration",
        None,
        2048,
        453_650_672,
    ),
    TowerCase(
        "mistral3-none", "mistral3", "Mistral3ForConditionalGeneration", None, 5120, 438_958_080
    ),
)

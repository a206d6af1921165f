"""The vision towers deskside counts (Llama 4; Qwen3-VL, Qwen3-VL-MoE, Qwen3.5,
Qwen3.5-MoE; Mistral 3) against the counts of vLLM's own modules built on the meta device
(tests/unit/vision_configs.py records them; tests/e2e/test_vision_towers.py recomputes
them live), how the plan says so, and the errors for a vision_config out of bounds."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from deskside.planner.families.config_values import ConfigValueError
from deskside.planner.families.vision_tower import TOWERS, vision_tower, vision_tower_params
from deskside.planner.registry import read_arch

from .vision_configs import (
    CASES,
    MISTRAL_SMALL_3_1_OUTER,
    MISTRAL_SMALL_3_1_VISION,
    QWEN3_5_27B_VISION,
    SCOUT_VISION,
    TowerCase,
)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_tower_counts_equal_vllms_modules(case: TowerCase) -> None:
    tower = vision_tower(case.config_json(), case.text_hidden)
    assert tower is not None
    assert tower.params == case.expected
    assert tower.defaulted == (case.vision is None)


def test_scout_tower_is_the_checkpoints_tensors() -> None:
    # the tensor sizes of Llama 4 Scout's checkpoint (vision_model.*, multi_modal_projector)
    layer = 4 * (1_982_464 + 1408) + 7_929_856 + 5632 + 7_929_856 + 1408 + 4 * 1408
    embeddings = 1408 + 812_416 + 827_904 + 4 * 1408  # class, positions, patches, 2 norms
    adapter = 23_068_672 + 16_777_216
    projector = 20_971_520
    total = 34 * layer + embeddings + adapter + projector
    assert TOWERS["Llama4ForConditionalGeneration"](SCOUT_VISION, 5120, {}) == total


# Qwen/Qwen3.5-27B's config.json as published (its layer_types written as a product)
QWEN3_5_27B: dict[str, Any] = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen3_5_text",
        "hidden_size": 5120,
        "num_hidden_layers": 64,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "intermediate_size": 17408,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "vocab_size": 248320,
        "full_attention_interval": 4,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "mtp_num_hidden_layers": 1,
        "max_position_embeddings": 262144,
        "tie_word_embeddings": False,
    },
    "vision_config": QWEN3_5_27B_VISION,
}
QWEN3_5_27B["text_config"]["layer_types"] *= 16


def test_qwen3_5_plan_counts_its_tower() -> None:
    arch = read_arch(QWEN3_5_27B)
    assert arch.params.vision == 460_730_096
    # the model's name: 27B with the tower (27.36B; its MTP layer is the drafter's)
    assert arch.params.total == pytest.approx(27e9, rel=0.02)
    assert any("vision tower and projector (461M parameters)" in n for n in arch.notes)
    assert not any("not counted" in n for n in arch.notes)
    text_only = read_arch({**QWEN3_5_27B, "architectures": ["Qwen3_5ForCausalLM"]})
    assert arch.params.total - text_only.params.total == 460_730_096


def test_qwen3_5_moe_reads_the_same_tower() -> None:
    cfg = copy.deepcopy(QWEN3_5_27B)
    cfg["architectures"] = ["Qwen3_5MoeForConditionalGeneration"]
    assert vision_tower_params(cfg, 5120) == 460_730_096
    # Qwen3-VL's config class lists three deepstack layers when the file names none
    cfg["architectures"] = ["Qwen3VLForConditionalGeneration"]
    del cfg["vision_config"]["deepstack_visual_indexes"]
    merger = 4608 * 4608 + 4608 + 4608 * 5120 + 5120
    assert vision_tower_params(cfg, 5120) == 460_730_096 + 3 * (2 * 4608 + merger)


@pytest.mark.parametrize(
    ("arch", "change", "key"),
    [
        ("Qwen3_5ForConditionalGeneration", {"num_heads": 7}, "vision_config.hidden_size"),
        ("Qwen3_5ForConditionalGeneration", {"depth": 0}, "vision_config.depth"),
        ("Qwen3_5ForConditionalGeneration", {"patch_size": True}, "vision_config.patch_size"),
        (
            "Qwen3_5ForConditionalGeneration",
            {"deepstack_visual_indexes": 3},
            "vision_config.deepstack_visual_indexes",
        ),
        (
            "Qwen3VLForConditionalGeneration",
            {"deepstack_visual_indexes": [1, "two"]},
            "vision_config.deepstack_visual_indexes[1]",
        ),
        (
            "Qwen3_5ForConditionalGeneration",
            {"num_position_embeddings": 10**9},
            "vision_config.num_position_embeddings",
        ),
        ("Llama4ForConditionalGeneration", {"num_attention_heads": 4096}, None),
        ("Llama4ForConditionalGeneration", {"image_size": 65536, "patch_size": 1}, None),
        (
            "Llama4ForConditionalGeneration",
            {"multi_modal_projector_bias": "no"},
            "vision_config.multi_modal_projector_bias",
        ),
        ("Llama4ForConditionalGeneration", {"hidden_size": 1.5}, "vision_config.hidden_size"),
    ],
)
def test_a_tower_out_of_bounds_is_refused_with_its_key(
    arch: str, change: dict[str, Any], key: str | None
) -> None:
    base = SCOUT_VISION if arch.startswith("Llama4") else QWEN3_5_27B_VISION
    with pytest.raises(ConfigValueError) as err:
        TOWERS[arch]({**base, **change}, 5120, {})
    if key is not None:
        assert err.value.key == key
    assert err.value.key.startswith("vision_config.")


def test_a_qwen3_5_without_vision_config_counts_the_default_tower() -> None:
    # Qwen3_5Config fills a missing vision_config with Qwen3_5VisionConfig(), which vLLM
    # builds (out_hidden_size 3584 whatever the language model's width)
    cfg = {k: v for k, v in QWEN3_5_27B.items() if k != "vision_config"}
    cfg["architectures"] = ["Qwen3_5ForConditionalGeneration"]
    arch = read_arch(cfg)
    assert arch.params.vision == 453_650_672
    assert any(
        "has no vision_config, so vLLM builds transformers' default" in n for n in arch.notes
    )
    # a text-only architecture has no tower
    flat = read_arch({**cfg, "architectures": ["Qwen3_5ForCausalLM"]})
    assert flat.params.vision == 0 and not any("vision" in n for n in flat.notes)


# mistralai/Mistral-Small-3.1-24B-Instruct-2503's config.json as published
MISTRAL_SMALL_3_1: dict[str, Any] = {
    "architectures": ["Mistral3ForConditionalGeneration"],
    "image_token_index": 10,
    "model_type": "mistral3",
    **MISTRAL_SMALL_3_1_OUTER,
    "text_config": {
        "attention_dropout": 0.0,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 5120,
        "initializer_range": 0.02,
        "intermediate_size": 32768,
        "max_position_embeddings": 131072,
        "model_type": "mistral",
        "num_attention_heads": 32,
        "num_hidden_layers": 40,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000000.0,
        "sliding_window": None,
        "use_cache": True,
        "vocab_size": 131072,
    },
    "torch_dtype": "bfloat16",
    "vision_config": MISTRAL_SMALL_3_1_VISION,
}


def test_mistral_small_counts_its_tower() -> None:
    arch = read_arch(MISTRAL_SMALL_3_1)
    assert arch.params.vision == 438_958_080
    # Mistral's "24B" (23.57B for the language model, 24.01B with the tower)
    assert arch.params.total == pytest.approx(24e9, rel=0.01)
    assert any("vision tower and projector (439M parameters)" in n for n in arch.notes)


def test_mistral3_builds_the_tower_up_to_its_deepest_feature_layer() -> None:
    read = TOWERS["Mistral3ForConditionalGeneration"]
    full = read(MISTRAL_SMALL_3_1_VISION, 5120, MISTRAL_SMALL_3_1_OUTER)
    # PixtralHFTransformerBlock: two RMSNorms, q, k, v, o, gate, up, down (no biases)
    layer = 2 * 1024 + 4 * 1024 * 1024 + 3 * 1024 * 4096
    for feature, missing in ((-1, 0), (-2, 1), (23, 1), ([2, -5], 4), (0, 24), (-30, 24)):
        outer = {**MISTRAL_SMALL_3_1_OUTER, "vision_feature_layer": feature}
        assert read(MISTRAL_SMALL_3_1_VISION, 5120, outer) == full - missing * layer, feature


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"vision_feature_layer": 25}, "vision_feature_layer"),
        ({"vision_feature_layer": []}, "vision_feature_layer"),
        ({"vision_feature_layer": [1, "last"]}, "vision_feature_layer[1]"),
        ({"vision_feature_layer": True}, "vision_feature_layer"),
        ({"spatial_merge_size": 0}, "spatial_merge_size"),
        ({"multimodal_projector_bias": 1}, "multimodal_projector_bias"),
    ],
)
def test_mistral3_wrapper_keys_out_of_bounds_are_refused(change: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigValueError) as err:
        read_arch({**MISTRAL_SMALL_3_1, **change})
    assert err.value.key == key


def test_mistral3_vision_config_out_of_bounds_is_refused() -> None:
    bad = {**MISTRAL_SMALL_3_1_VISION, "num_attention_heads": 5}
    with pytest.raises(ConfigValueError) as err:
        read_arch({**MISTRAL_SMALL_3_1, "vision_config": bad})
    assert err.value.key == "vision_config.hidden_size"

"""The vision towers deskside counts have exactly as many parameters as vLLM 0.32 builds:
vLLM's own classes (Llama4VisionModel and Llama4MultiModalProjector; Qwen3_VisionTransformer,
which the Qwen3-VL, Qwen3-VL-MoE, Qwen3.5 and Qwen3.5-MoE wrappers build) are constructed
on the meta device in a child process (tests/e2e/vision_counts.py) and their parameters
counted, for the published configs and small ones in tests/unit/vision_configs.py (whose
recorded numbers the unit tests use) and for seeded random configs."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from deskside.planner.families.vision_tower import vision_tower

from ..unit.vision_configs import CASES, TowerCase

pytestmark = pytest.mark.e2e

COUNTER = Path(__file__).with_name("vision_counts.py")
ARCHITECTURES = {
    "llama4": "Llama4ForConditionalGeneration",
    "mistral3": "Mistral3ForConditionalGeneration",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
    "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration",
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
}


def _random_llama4(rng: random.Random) -> dict[str, Any]:
    heads, patch = rng.randint(1, 6), rng.randint(2, 8)
    vision: dict[str, Any] = {
        "hidden_size": heads * rng.choice((8, 16, 24, 32)),
        "num_attention_heads": heads,
        "intermediate_size": rng.randint(8, 300),
        "num_hidden_layers": rng.randint(1, 4),
        "num_channels": rng.randint(1, 4),
        "image_size": patch * rng.randint(1, 12),
        "patch_size": patch,
        "vision_output_dim": rng.randint(8, 128),
        "projector_input_dim": rng.randint(8, 128),
        "projector_output_dim": rng.randint(8, 128),
        "multi_modal_projector_bias": rng.random() < 0.5,
        "rope_theta": 10000,
    }
    optional = ["intermediate_size", "num_hidden_layers", "num_channels", "vision_output_dim"]
    optional += ["projector_input_dim", "projector_output_dim", "multi_modal_projector_bias"]
    for key in rng.sample(optional, rng.randint(0, 2)):
        del vision[key]
    return vision


def _random_qwen(rng: random.Random) -> dict[str, Any]:
    heads = rng.randint(1, 4)
    vision: dict[str, Any] = {
        "hidden_size": heads * rng.choice((8, 16)),
        "num_heads": heads,
        "intermediate_size": rng.randint(8, 200),
        "depth": rng.randint(1, 4),
        "in_channels": rng.randint(1, 4),
        "patch_size": rng.randint(1, 6),
        "temporal_patch_size": rng.randint(1, 3),
        "spatial_merge_size": rng.randint(1, 3),
        "out_hidden_size": rng.randint(8, 100),
        "num_position_embeddings": rng.randint(1, 100),
        "deepstack_visual_indexes": sorted(rng.sample(range(4), rng.randint(0, 3))),
    }
    optional = [k for k in vision if k not in ("hidden_size", "num_heads")]
    for key in rng.sample(optional, rng.randint(0, 3)):
        del vision[key]
    return vision


def _random_mistral3(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    heads, layers = rng.randint(1, 4), rng.randint(1, 5)
    vision: dict[str, Any] = {
        "hidden_size": heads * rng.choice((8, 16, 32)),
        "num_attention_heads": heads,
        "intermediate_size": rng.randint(8, 200),
        "num_hidden_layers": layers,
        "num_channels": rng.randint(1, 4),
        "patch_size": rng.randint(1, 16),
    }
    for key in rng.sample(["intermediate_size", "num_channels", "patch_size"], rng.randint(0, 2)):
        del vision[key]
    feature: int | list[int] = rng.randint(-layers - 1, layers)
    if rng.random() < 0.4:
        feature = [rng.randint(-layers - 1, layers) for _ in range(rng.randint(1, 3))]
    outer = {
        "spatial_merge_size": rng.randint(1, 4),
        "multimodal_projector_bias": rng.random() < 0.5,
        "vision_feature_layer": feature,
    }
    return vision, outer


def _cases() -> list[TowerCase]:
    """The recorded cases, then seeded random ones (expected 0: not recorded)."""
    cases = list(CASES)
    rng = random.Random(20261206)
    arch = ARCHITECTURES
    for i in range(4):
        vision, hidden = _random_llama4(rng), rng.randint(8, 96)
        cases.append(TowerCase(f"llama4-random-{i}", "llama4", arch["llama4"], vision, hidden, 0))
    for i, tower in enumerate(("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe") * 2):
        vision, hidden = _random_qwen(rng), rng.randint(8, 96)
        cases.append(TowerCase(f"{tower}-random-{i}", tower, arch[tower], vision, hidden, 0))
    for i in range(5):
        (vision, outer), hidden = _random_mistral3(rng), rng.randint(8, 96)
        name = f"mistral3-random-{i}"
        cases.append(TowerCase(name, "mistral3", arch["mistral3"], vision, hidden, 0, outer))
    return cases


def test_vision_tower_counts_equal_vllms_modules() -> None:
    cases = _cases()
    request = [
        {"tower": c.tower, "vision": c.vision, "text_hidden": c.text_hidden, "outer": c.outer}
        for c in cases
    ]
    done = subprocess.run(
        [sys.executable, str(COUNTER)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    counts = json.loads(done.stdout)
    assert len(counts) == len(cases)
    for case, built in zip(cases, counts, strict=True):
        assert case.architecture == ARCHITECTURES[case.tower]
        tower = vision_tower(case.config_json(), case.text_hidden)
        assert tower is not None and tower.defaulted == (case.vision is None)
        assert tower.params == built, (case.name, case.vision, case.outer)
        if case in CASES:
            assert case.expected == built, case.name
    # the published towers are big: a count of a near-empty module would not pass as one
    published = [built for case, built in zip(cases, counts, strict=True) if case.name[0].isupper()]
    assert len(published) == 4 and min(published) > 400_000_000

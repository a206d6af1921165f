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

from deskside.planner.families.vision_tower import TOWERS

from ..unit.vision_configs import CASES

pytestmark = pytest.mark.e2e

COUNTER = Path(__file__).with_name("vision_counts.py")
ARCHITECTURES = {
    "llama4": "Llama4ForConditionalGeneration",
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


def _cases() -> list[tuple[str, str, dict[str, Any], int, int | None]]:
    """(name, tower, vision_config, text hidden size, recorded count or None)."""
    cases: list[tuple[str, str, dict[str, Any], int, int | None]] = [
        (c.name, c.tower, c.vision, c.text_hidden, c.expected) for c in CASES
    ]
    rng = random.Random(20261206)
    for i in range(4):
        cases.append(
            (f"llama4-random-{i}", "llama4", _random_llama4(rng), rng.randint(8, 96), None)
        )
    for i, tower in enumerate(("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe") * 2):
        cases.append((f"{tower}-random-{i}", tower, _random_qwen(rng), rng.randint(8, 96), None))
    return cases


def test_vision_tower_counts_equal_vllms_modules() -> None:
    cases = _cases()
    request = [{"tower": t, "vision": v, "text_hidden": h} for _, t, v, h, _ in cases]
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
    for (name, tower, vision, text_hidden, recorded), built in zip(cases, counts, strict=True):
        read = TOWERS[ARCHITECTURES[tower]]
        assert read(vision, text_hidden) == built, (name, vision)
        if recorded is not None:
            assert recorded == built, name
    # the published towers are big: a count of a near-empty module would not pass as one
    assert min(counts[:3]) > 400_000_000

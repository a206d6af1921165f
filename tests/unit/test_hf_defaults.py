"""The planner fills a config's missing fields as transformers does: its table is what the
installed transformers gives (regenerate with scripts/hf-defaults when it differs), and a
config as Gemma 3 is published (a nested text_config with the head counts, vocab_size and
context length left out) plans as the same config written out in full."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from deskside.planner.families.hf_defaults import constant_defaults, with_defaults
from deskside.planner.families.hf_defaults_table import DEFAULTS
from deskside.planner.registry import known_model_types, read_arch

# google/gemma-3-4b-it's config.json as published (its vision_config shortened)
GEMMA3_4B = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "text_config": {
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "model_type": "gemma3_text",
        "num_hidden_layers": 34,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
    },
    "torch_dtype": "bfloat16",
    "vision_config": {"model_type": "siglip_vision_model"},
}


@pytest.mark.parametrize("model_type", known_model_types())
def test_the_table_is_what_transformers_gives(model_type: str) -> None:
    assert DEFAULTS.get(model_type, {}) == constant_defaults(model_type), (
        "regenerate: .venv/bin/python scripts/hf-defaults > "
        "src/deskside/planner/families/hf_defaults_table.py"
    )


def test_a_derived_default_is_left_to_the_family() -> None:
    # Llama's head_dim is hidden_size / heads and its KV heads the heads: not constants
    assert "head_dim" not in DEFAULTS["llama"]
    assert "num_key_value_heads" not in DEFAULTS["llama"]
    assert DEFAULTS["gemma3_text"]["head_dim"] == 256  # Gemma 3's is a constant


def test_an_explicit_value_stays_even_null() -> None:
    cfg = {"model_type": "gemma3_text", "sliding_window": None, "vocab_size": 1000}
    filled = with_defaults(cfg)
    assert filled["sliding_window"] is None and filled["vocab_size"] == 1000
    assert filled["max_position_embeddings"] == 131072
    assert with_defaults({"model_type": "unknown"}) == {"model_type": "unknown"}


def test_gemma3_as_published_plans_as_written_out(tmp_path: Path) -> None:
    published = read_arch(GEMMA3_4B)
    full = json.loads(json.dumps(GEMMA3_4B))
    full["text_config"].update(
        vocab_size=262208,
        max_position_embeddings=131072,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=256,
    )
    written_out = read_arch(full)
    assert replace(published, notes=()) == replace(written_out, notes=())
    assert published.max_position_embeddings == 131072
    assert "vocab_size = 262208" in published.notes[-1]
    assert not any("vocab_size" in note for note in written_out.notes)

"""The family registry: a config.json finds its family once, by model_type, and the
planner asks that family for everything family-specific."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from deskside.errors import ModelConfigError
from deskside.planner.families.deepseek_v4 import DeepseekV4Family
from deskside.planner.families.generic import GenericFamily
from deskside.planner.registry import family_for, family_named, read_arch

ROOT = Path(__file__).parents[2]
V4_CONFIG = json.loads(
    (ROOT / "recipes" / "dual-spark-deepseek-v4-flash" / "config.json").read_text()
)
LLAMA = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "num_hidden_layers": 2,
}


def test_generic_config_dispatches_to_the_generic_family() -> None:
    assert isinstance(family_for(LLAMA), GenericFamily)
    arch = read_arch(LLAMA)
    assert arch.family == "llama"
    assert isinstance(family_named(arch.family), GenericFamily)


def test_v4_config_dispatches_to_the_v4_family() -> None:
    assert isinstance(family_for(V4_CONFIG), DeepseekV4Family)
    arch = read_arch(V4_CONFIG)
    assert arch.family == "deepseek_v4"
    assert isinstance(family_named(arch.family), DeepseekV4Family)


@pytest.mark.parametrize(
    ("model_type", "family"),
    [
        ("mistral", GenericFamily),
        ("qwen3_moe", GenericFamily),
        ("gemma3_text", GenericFamily),
        ("deepseek_v3", GenericFamily),
        ("deepseek_v32", GenericFamily),
        ("deepseek_v4", DeepseekV4Family),
    ],
)
def test_every_model_type_has_one_family(model_type: str, family: type) -> None:
    assert isinstance(family_for({"model_type": model_type}), family)


def test_multimodal_wrapper_dispatches_on_its_text_config() -> None:
    wrapped = {"model_type": "gemma3", "text_config": {**LLAMA, "model_type": "gemma3_text"}}
    assert isinstance(family_for(wrapped), GenericFamily)
    assert read_arch(wrapped).family == "gemma3"


def test_unknown_model_type_and_family_are_user_errors() -> None:
    with pytest.raises(ModelConfigError, match="not one deskside can plan"):
        family_for({"model_type": "mamba"})
    with pytest.raises(ModelConfigError, match="no model family"):
        family_named("mamba")


def test_families_never_import_the_registry_or_the_planner() -> None:
    folder = ROOT / "src" / "deskside" / "planner" / "families"
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module not in (
                    "deskside.planner.registry",
                    "deskside.planner.plan",
                    "deskside.planner.inputs",
                ), f"{path.name} imports {node.module}"

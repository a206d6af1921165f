"""config.json validation: the file read bounded, every value a family reads checked
(type, range, consistency), and errors that name the file, the key and a fix. Each test
writes a real config.json in tmp_path and reads it as `deskside plan --model-dir` does."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from deskside.errors import ModelConfigError, UsageError
from deskside.planner.bounds import MAX_CONFIG_BYTES, MAX_JSON_DEPTH
from deskside.planner.config_file import json_depth, read_config_json
from deskside.planner.families.config_values import show
from deskside.planner.inputs import Overrides, plan_model_dir, read_model_dir
from deskside.planner.types import ModelArch
from deskside.tiny import TOKENIZER_VOCAB_TARGET, model_config

ROOT = Path(__file__).resolve().parents[2]
LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
}
QWEN_MOE: dict[str, Any] = {
    **LLAMA,
    "model_type": "qwen3_moe",
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 768,
}
# the tiny DeepSeek-V3 deskside generates (made on demand, not kept in git)
DEEPSEEK_V3 = model_config("deepseek-v3", TOKENIZER_VOCAB_TARGET)
DEEPSEEK_V4 = json.loads((ROOT / "recipes/dual-spark-deepseek-v4-flash/config.json").read_text())


def write(tmp_path: Path, cfg: dict[str, Any] | str | bytes, **changes: Any) -> Path:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    if isinstance(cfg, bytes):
        path.write_bytes(cfg)
    elif isinstance(cfg, str):
        path.write_text(cfg)
    else:
        data = {**cfg, **changes}
        path.write_text(json.dumps({k: v for k, v in data.items() if v is not ...}))
    return folder


def refused(tmp_path: Path, cfg: dict[str, Any] | str | bytes, **changes: Any) -> ModelConfigError:
    folder = write(tmp_path, cfg, **changes)
    with pytest.raises(ModelConfigError) as info:
        read_model_dir(folder)
    assert info.value.exit_code == 2
    return info.value


def read(tmp_path: Path, cfg: dict[str, Any], **changes: Any) -> ModelArch:
    return read_model_dir(write(tmp_path, cfg, **changes))


# --------------------------------------------------------------------------- the file


def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    os.mkfifo(tmp_path / "model" / "config.json")
    t0 = time.monotonic()
    with pytest.raises(ModelConfigError, match="FIFO"):
        read_model_dir(tmp_path / "model")
    assert time.monotonic() - t0 < 1.0


def test_a_folder_named_config_json_is_refused(tmp_path: Path) -> None:
    (tmp_path / "model" / "config.json").mkdir(parents=True)
    with pytest.raises(ModelConfigError, match="folder"):
        read_model_dir(tmp_path / "model")


def test_a_device_is_refused(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").symlink_to("/dev/zero")
    with pytest.raises(ModelConfigError, match="device"):
        read_model_dir(tmp_path / "model")


def test_a_link_to_a_regular_file_is_read(tmp_path: Path) -> None:
    """The Hugging Face cache keeps config.json as a link to a blob."""
    blob = tmp_path / "blob"
    blob.write_text(json.dumps(LLAMA))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").symlink_to(blob)
    assert read_model_dir(tmp_path / "model").num_hidden_layers == 32


def test_an_oversized_file_is_refused(tmp_path: Path) -> None:
    error = refused(tmp_path, " " * (MAX_CONFIG_BYTES + 1))
    assert "at most" in error.message


def test_nesting_is_bounded(tmp_path: Path) -> None:
    deep = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)
    error = refused(tmp_path, '{"a": ' + deep + "}")
    assert "deep" in error.message
    assert "too deep" in refused(tmp_path, "[" * 100_000 + "]" * 100_000).message
    assert json_depth({"a": "[[[[", "b": [[1]]}) == 3
    assert json_depth({}) == 1


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
def test_non_finite_numbers_are_refused(tmp_path: Path, literal: str) -> None:
    text = json.dumps(LLAMA).replace('"num_hidden_layers": 32', f'"num_hidden_layers": {literal}')
    error = refused(tmp_path, text)
    assert "not valid JSON" in error.message


def test_bad_json_names_line_and_column(tmp_path: Path) -> None:
    error = refused(tmp_path, '{\n  "a": 1,\n}')
    assert ":3:1: not valid JSON" in error.message


def test_not_utf8_and_not_an_object(tmp_path: Path) -> None:
    assert "UTF-8" in refused(tmp_path, b"\xff\xfe\x00").message
    assert "JSON object" in refused(tmp_path, "[1]").message


def test_a_utf8_bom_is_allowed(tmp_path: Path) -> None:
    path = write(tmp_path, "\ufeff" + json.dumps(LLAMA)) / "config.json"
    assert read_config_json(path)["model_type"] == "llama"


# --------------------------------------------------------------------------- values


def test_an_error_names_the_file_and_the_key(tmp_path: Path) -> None:
    error = refused(tmp_path, LLAMA, num_hidden_layers=10**9)
    assert error.location is not None
    assert error.location.path == str(tmp_path / "model" / "config.json")
    assert error.location.field == "num_hidden_layers"
    assert error.message == "num_hidden_layers is 1000000000; expected 1 to 1024"
    assert error.hint


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (True, "is a boolean; expected an integer"),
        ("32", "is a string; expected an integer"),
        (32.5, "is 32.5; expected an integer"),
        ([32], "is a list; expected an integer"),
        (None, "is null"),
        (0, "is 0; expected 1 to 1024"),
        (-3, "is -3; expected 1 to 1024"),
        (1025, "is 1025; expected 1 to 1024"),
    ],
)
def test_layer_counts_are_positive_bounded_integers(
    tmp_path: Path, value: object, problem: str
) -> None:
    assert refused(tmp_path, LLAMA, num_hidden_layers=value).message == (
        f"num_hidden_layers {problem}"
    )


def test_a_whole_float_is_an_integer(tmp_path: Path) -> None:
    assert read(tmp_path, LLAMA, num_hidden_layers=32.0).num_hidden_layers == 32


def test_a_missing_key_takes_transformers_default(tmp_path: Path) -> None:
    # LlamaConfig's vocab_size: 32000 (the weights' embedding rows)
    missing = read(tmp_path, LLAMA, vocab_size=...)
    (tmp_path / "explicit").mkdir()
    explicit = read(tmp_path / "explicit", LLAMA, vocab_size=32000)
    assert replace(missing, notes=()) == replace(explicit, notes=())
    assert "vocab_size = 32000" in missing.notes[-1]
    # a key no default covers is still refused by name (compress_ratios: below)


def test_null_counts_as_missing_for_optional_keys(tmp_path: Path) -> None:
    arch = read(tmp_path, LLAMA, head_dim=None, num_key_value_heads=None)
    assert arch.layers[0].head_size == 4096 // 32
    assert arch.layers[0].num_kv_heads == 32


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("num_attention_heads", 0, "num_attention_heads is 0"),
        ("num_attention_heads", 4096, "num_attention_heads is 4096; expected 1 to 1024"),
        ("head_dim", 0, "head_dim is 0"),
        ("head_dim", -128, "head_dim is -128"),
        ("head_dim", 8192, "head_dim is 8192; expected 1 to 4096"),
        ("vocab_size", 10**12, "vocab_size is 1000000000000"),
        ("hidden_size", 16, "head size would be 0"),
        ("max_position_embeddings", 2**40, "max_position_embeddings is 1099511627776"),
        ("intermediate_size", 0, "intermediate_size is 0"),
        ("torch_dtype", "int4", "torch_dtype is 'int4'; expected one of"),
        ("model_type", ["llama"], "model_type is a list"),
        ("quantization_config", "fp8", "quantization_config is a string; expected an object"),
        ("quantization_config", {"quant_method": 8}, "quantization_config.quant_method is 8"),
        ("rope_scaling", {"rope_type": "linear", "factor": 1e6}, "rope_scaling.factor"),
        ("rope_scaling", {"rope_type": "linear", "factor": 0}, "rope_scaling.factor is 0"),
        ("tie_word_embeddings", "no", "tie_word_embeddings is 'no'; expected true or false"),
        ("architectures", "LlamaForCausalLM", "architectures is"),
    ],
)
def test_ranges_and_types(tmp_path: Path, key: str, value: object, fragment: str) -> None:
    assert fragment in refused(tmp_path, LLAMA, **{key: value}).message


def test_kv_heads_divide_the_heads(tmp_path: Path) -> None:
    error = refused(tmp_path, LLAMA, num_key_value_heads=7)
    assert error.message == "num_attention_heads is 32, not a multiple of num_key_value_heads (7)"
    error = refused(tmp_path, LLAMA, num_key_value_heads=64)
    assert "num_key_value_heads is 64; expected 1 to 32" in error.message


def test_experts_per_token_at_most_the_experts(tmp_path: Path) -> None:
    error = refused(tmp_path, QWEN_MOE, num_experts_per_tok=9)
    assert error.message == "num_experts_per_tok is 9; expected 1 to 8 (num_experts)"
    assert read(tmp_path, QWEN_MOE).moe is not None


def test_sliding_window_keys(tmp_path: Path) -> None:
    gemma = {**LLAMA, "model_type": "gemma3_text", "sliding_window": 1024}
    assert (
        "sliding_window_pattern is 0" in refused(tmp_path, gemma, sliding_window_pattern=0).message
    )
    mistral = {**LLAMA, "model_type": "mistral"}
    assert "sliding_window is -1" in refused(tmp_path, mistral, sliding_window=-1).message
    assert read(tmp_path, mistral, sliding_window=0).layers[0].kind == "full"
    error = refused(tmp_path, gemma, layer_types=[1] * 32)
    assert error.message == "layer_types[0] is 1; expected a string"


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("kv_lora_rank", -512, "kv_lora_rank is -512"),
        ("kv_lora_rank", 0, "kv_lora_rank is 0"),
        ("q_lora_rank", -1, "q_lora_rank is -1"),
        ("qk_rope_head_dim", 0, "qk_rope_head_dim is 0"),
        (
            "num_nextn_predict_layers",
            10**9,
            "num_nextn_predict_layers is 1000000000; expected 0 to 16",
        ),
        ("moe_layer_freq", 0, "moe_layer_freq is 0"),
        ("num_experts_per_tok", 9, "num_experts_per_tok is 9; expected 0 to 8"),
    ],
)
def test_mla_values(tmp_path: Path, key: str, value: object, fragment: str) -> None:
    assert fragment in refused(tmp_path, DEEPSEEK_V3, **{key: value}).message


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("compress_ratios", [0, 4], "compress_ratios has 2 entries; expected at least 43"),
        (
            "compress_ratios",
            [0, 0, 4, 7] + [4] * 42,
            "compress_ratios[3] is 7; expected one of 0, 4, 128",
        ),
        ("compress_ratios", ..., "compress_ratios is missing"),
        ("head_dim", 0, "head_dim is 0"),
        ("n_mtp_layers", 10**9, "n_mtp_layers is 1000000000"),
        ("o_groups", -8, "o_groups is -8"),
        ("n_routed_experts", 0, "n_routed_experts is 0"),
        ("num_experts_per_tok", 257, "num_experts_per_tok is 257; expected 1 to 256"),
        ("index_n_heads", ..., "index_n_heads is missing"),
    ],
)
def test_deepseek_v4_values(tmp_path: Path, key: str, value: object, fragment: str) -> None:
    assert fragment in refused(tmp_path, DEEPSEEK_V4, **{key: value}).message


def test_text_config_errors_name_the_key(tmp_path: Path) -> None:
    assert "text_config is a list" in refused(tmp_path, LLAMA, text_config=[1]).message
    wrapped = {"architectures": ["X"], "text_config": {**LLAMA, "head_dim": 0}}
    assert "head_dim is 0" in refused(tmp_path, wrapped).message


def test_heads_divisible_by_tensor_parallel_size(tmp_path: Path) -> None:
    folder = write(tmp_path, LLAMA)
    with pytest.raises(UsageError, match=r"divisible by tensor parallel size \(3\)") as info:
        plan_model_dir(folder, Overrides(tensor_parallel_size=3))
    assert info.value.exit_code == 2
    assert plan_model_dir(folder, Overrides(tensor_parallel_size=4)).num_blocks > 0


def test_show_keeps_messages_short() -> None:
    assert show(10**100) == "a 101-digit number"
    assert show(-(10**100)) == "a negative 101-digit number"
    assert show(-5) == "-5"
    assert show("x" * 500) == "a string of 500 characters"
    assert show(float("nan")) == "NaN"
    assert show(1e9) == "1000000000"

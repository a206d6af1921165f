"""A config.json's reader is chosen as vLLM chooses a model's code: a listed model type by
its reader, any other by its architectures (vLLM's model registry) and then its fields.
An unlisted attention model plans; one vLLM runs with Mamba or linear-attention state is
refused; a missing field is refused by name with what vLLM would do; hostile values stay
bounded."""

from __future__ import annotations

import time
from typing import Any

import pytest

from deskside.errors import ModelConfigError
from deskside.planner.families.config_values import ConfigValueError
from deskside.planner.families.generic import read_any
from deskside.planner.families.generic_cache import generic_layer_specs
from deskside.planner.families.vllm_architectures import ARCHITECTURES
from deskside.planner.kv import KVSpec, Limits, max_memory_usage_bytes
from deskside.planner.registry import family_for, read_arch
from deskside.tiny import TOKENIZER_VOCAB_TARGET, model_config

from .engine_settings import engine_settings

# a model type no family lists, run by vLLM's granite module (plain attention)
OLMO2: dict[str, Any] = {
    "architectures": ["GraniteForCausalLM"],
    "model_type": "granite",
    "hidden_size": 2048,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "intermediate_size": 8192,
    "vocab_size": 100352,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


def kinds(cfg: dict[str, Any]) -> list[str]:
    return [la.kind for la in read_arch(cfg).target_layers]


def test_the_table_names_vllm_modules_and_what_they_cache() -> None:
    assert ARCHITECTURES["GptOssForCausalLM"] == ("gpt_oss", "attention")
    assert ARCHITECTURES["DeepseekV3ForCausalLM"] == ("deepseek_v2", "attention")
    assert ARCHITECTURES["Llama4ForConditionalGeneration"] == ("mllama4", "attention")
    assert ARCHITECTURES["JambaForCausalLM"] == ("jamba", "hybrid")
    assert ARCHITECTURES["MambaForCausalLM"] == ("mamba", "attention_free")


def test_an_unlisted_gqa_model_plans_from_its_fields() -> None:
    arch = read_arch(OLMO2)
    assert arch.family == "generic" and arch.model_type == "granite"
    assert {(la.kind, la.num_kv_heads, la.head_size) for la in arch.layers} == {
        ("full", 8, 2048 // 16)
    }
    assert any("granite model code (GraniteForCausalLM)" in n for n in arch.notes)
    # Attention.get_kv_cache_spec: heads x (K + V) x 2 bytes x block_size per layer
    s = engine_settings(
        device="cpu",
        tensor_parallel_size=1,
        max_model_len=4096,
        derived_max_model_len=4096,
        max_num_batched_tokens=4096,
        enforce_eager=True,
    )
    specs = generic_layer_specs(arch, s)
    assert len(specs) == 16
    assert {sp.page_size_bytes for sp in specs.values()} == {16 * 8 * (128 + 128) * 2}


def test_a_class_vllm_has_no_code_for_plans_as_its_transformers_backend_would() -> None:
    arch = read_arch({**OLMO2, "architectures": ["MyLabForCausalLM"], "model_type": "mylab"})
    assert arch.num_hidden_layers == 16
    assert any("no model code of its own for MyLabForCausalLM" in n for n in arch.notes)
    # the registry runs OLMo 2 through transformers' own code
    olmo2 = read_arch({**OLMO2, "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2"})
    assert any("Transformers backend (Olmo2ForCausalLM)" in n for n in olmo2.notes)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"sliding_window": 512, "sliding_window_pattern": 4}, ["sliding"] * 3 + ["full"]),
        ({"sliding_window": 512}, ["sliding"] * 4),
        (
            {"sliding_window": 512, "layer_types": ["full_attention", "sliding_attention"] * 2},
            ["full", "sliding", "full", "sliding"],
        ),
        # only Llama 4's code builds chunked local attention: others keep the whole context
        ({"attention_chunk_size": 256, "no_rope_layers": [1, 0, 1, 1]}, ["full"] * 4),
        ({"attention_chunk_size": 256}, ["full"] * 4),
        ({}, ["full"] * 4),
    ],
)
def test_the_fields_say_which_layers_slide_or_chunk(
    fields: dict[str, Any], expected: list[str]
) -> None:
    assert kinds({**OLMO2, "num_hidden_layers": 4, **fields}) == expected


def test_chunked_layers_outside_llama4_code_are_noted() -> None:
    arch = read_arch({**OLMO2, "attention_chunk_size": 256})
    assert any("only in Llama 4's code" in n for n in arch.notes)
    llama4 = {**OLMO2, "architectures": ["Llama4ForCausalLM"], "model_type": "my_llama4"}
    assert {la.kind for la in read_arch({**llama4, "attention_chunk_size": 256}).layers} == {
        "chunked",
        "full",
    }


def test_a_missing_field_is_refused_by_name_with_what_vllm_would_do() -> None:
    cfg = {k: v for k, v in OLMO2.items() if k != "num_attention_heads"}
    with pytest.raises(ConfigValueError) as err:
        read_arch(cfg)
    assert err.value.key == "num_attention_heads"
    assert "is missing" in err.value.message
    assert "granite model code (GraniteForCausalLM)" in err.value.message


def test_no_architectures_is_refused_as_vllm_cannot_pick_the_code() -> None:
    cfg = {k: v for k, v in OLMO2.items() if k != "architectures"}
    with pytest.raises(ModelConfigError, match="names no architectures"):
        family_for(cfg)


@pytest.mark.parametrize(
    ("arch", "model_type"),
    [("JambaForCausalLM", "jamba"), ("MambaForCausalLM", "mamba")],
)
def test_a_hybrid_or_attention_free_class_is_refused(arch: str, model_type: str) -> None:
    with pytest.raises(ModelConfigError, match="Mamba or linear-attention state"):
        family_for({**OLMO2, "architectures": [arch], "model_type": model_type})


def test_a_state_layer_in_layer_types_is_refused_by_name() -> None:
    cfg = {**OLMO2, "num_hidden_layers": 2, "layer_types": ["full_attention", "linear_attention"]}
    with pytest.raises(ConfigValueError) as err:
        read_arch(cfg)
    assert err.value.key == "layer_types[1]"


def test_kv_lora_rank_is_mla_only_for_the_model_types_vllm_runs_as_mla() -> None:
    v3 = model_config("deepseek-v3", TOKENIZER_VOCAB_TARGET)
    other = {**v3, "architectures": ["GraniteForCausalLM"], "model_type": "granite"}
    with pytest.raises(ConfigValueError) as err:
        read_arch(other)
    assert err.value.key == "kv_lora_rank"
    kimi = read_arch({**v3, "model_type": "kimi_k2"})
    assert kimi.use_mla and kimi.layers == read_arch(v3).layers


def test_known_families_keep_their_readers() -> None:
    llama = {**OLMO2, "architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    assert read_arch(llama).family == "llama"
    assert read_any(llama).notes == ()  # no note of how the reader was chosen


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num_hidden_layers", 10**9),
        ("attention_chunk_size", 2**40),
        ("sliding_window", -1),
        ("sliding_window_pattern", 0),
        ("num_local_experts", 10**7),
        ("num_key_value_heads", 3),  # 16 heads are not a multiple of 3
        ("head_dim", 10**6),
        ("no_rope_layers", [2, 1, 1, 1]),
        ("layer_types", ["full_attention", {"x": 1}] + ["full_attention"] * 10**5),
        ("layer_types", "sliding_attention"),
    ],
)
def test_hostile_values_are_refused_fast(key: str, value: Any) -> None:
    cfg = {**OLMO2, "num_hidden_layers": 4, "sliding_window": 128, key: value}
    if key == "no_rope_layers":  # read with chunked attention only
        cfg["attention_chunk_size"] = 64
    t0 = time.perf_counter()
    with pytest.raises(ConfigValueError):
        read_arch(cfg)
    assert time.perf_counter() - t0 < 1.0


def test_chunked_local_attention_holds_one_chunk_plus_the_tokens_in_flight() -> None:
    # ChunkedLocalAttentionSpec.max_admission_blocks_per_request:
    # cdiv(min(attention_chunk_size + max_in_flight_tokens, max_model_len), block_size)
    spec = KVSpec(type="chunked", block_size=16, page_size_bytes=4096, attention_chunk_size=512)
    assert max_memory_usage_bytes(spec, Limits(16384, 2048)) == (2560 // 16) * 4096
    assert max_memory_usage_bytes(spec, Limits(1000, 2048)) == 63 * 4096  # cdiv(1000, 16)

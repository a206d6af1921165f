"""The new families' readers against the parameter counts their makers publish (model
cards): gpt-oss-20b 20.91B total / 3.61B active without the embeddings, gpt-oss-120b
116.83B / 5.13B; GLM-4.5 355B (with its MTP layer), GLM-4.5-Air 106B; Llama 4 Scout 109B
and Maverick 400B with their vision towers (17B active, without them). And the cache each
layer gets, layer by layer, as vLLM's model code builds it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from deskside.planner.registry import read_arch

from .engine_settings import engine_settings
from .vision_configs import SCOUT_VISION

GPT_OSS_20B: dict[str, Any] = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "num_hidden_layers": 24,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 2880,
    "num_local_experts": 32,
    "num_experts_per_tok": 4,
    "experts_per_token": 4,
    "vocab_size": 201088,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router"],
    },
    "rope_scaling": {
        "rope_type": "yarn",
        "factor": 32.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": False,
        "original_max_position_embeddings": 4096,
    },
}
GPT_OSS_120B = {
    **GPT_OSS_20B,
    "num_hidden_layers": 36,
    "num_local_experts": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
}
GLM_45: dict[str, Any] = {
    "architectures": ["Glm4MoeForCausalLM"],
    "model_type": "glm4_moe",
    "hidden_size": 5120,
    "num_hidden_layers": 92,
    "num_attention_heads": 96,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "partial_rotary_factor": 0.5,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "n_routed_experts": 160,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "num_nextn_predict_layers": 1,
    "attention_bias": True,
    "use_qk_norm": False,
    "vocab_size": 151552,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
GLM_45_AIR = {
    **GLM_45,
    "hidden_size": 4096,
    "num_hidden_layers": 46,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "n_routed_experts": 128,
    "first_k_dense_replace": 1,
}
SCOUT: dict[str, Any] = {
    "architectures": ["Llama4ForConditionalGeneration"],
    "model_type": "llama4",
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "llama4_text",
        "hidden_size": 5120,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
        "vocab_size": 202048,
        "attention_chunk_size": 8192,
        "max_position_embeddings": 10485760,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 16.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
        },
    },
    "vision_config": SCOUT_VISION,
}
MAVERICK = copy.deepcopy(SCOUT)
MAVERICK["text_config"].update(num_local_experts=128, interleave_moe_layer_step=2)


@pytest.mark.parametrize(
    ("cfg", "total", "active"),
    [(GPT_OSS_20B, 20.91e9, 3.61e9), (GPT_OSS_120B, 116.83e9, 5.13e9)],
)
def test_gpt_oss_counts_as_published(cfg: dict[str, Any], total: float, active: float) -> None:
    arch = read_arch(cfg)
    assert arch.params.total == pytest.approx(total, rel=0.002)
    # OpenAI's active count leaves the input embeddings out
    assert arch.active_params - arch.params.embedding == pytest.approx(active, rel=0.005)


def test_gpt_oss_layers_alternate_and_experts_are_mxfp4() -> None:
    arch = read_arch(GPT_OSS_20B)
    # OAIAttention._build_attention: config.sliding_window on even layers only
    assert [(la.kind, la.sliding_window) for la in arch.layers[:4]] == [
        ("sliding", 128),
        ("full", None),
        ("sliding", 128),
        ("full", None),
    ]
    assert {(la.num_kv_heads, la.head_size, la.head_size_v) for la in arch.layers} == {(8, 64, 64)}
    # Mxfp4Config.get_quant_method: linear layers unquantized, routed experts MXFP4
    assert arch.weights_format == "bf16+mxfp4"
    # the published checkpoint: 13.8 GB
    assert arch.weight_bytes() / 1e9 == pytest.approx(13.8, rel=0.03)


@pytest.mark.parametrize(("cfg", "total"), [(GLM_45, 355e9), (GLM_45_AIR, 106e9)])
def test_glm45_counts_as_published(cfg: dict[str, Any], total: float) -> None:
    arch = read_arch(cfg)
    with_mtp = arch.params.total + arch.params.draft_layer + arch.params.draft_layer_experts
    assert arch.params.total <= total * 1.01 and with_mtp >= total * 0.99
    assert arch.moe is not None
    assert arch.moe.num_moe_layers == cfg["num_hidden_layers"] - cfg["first_k_dense_replace"]


def test_glm45_mtp_layer_is_a_draft_gqa_layer() -> None:
    arch = read_arch(GLM_45)
    assert arch.num_mtp_layers == 1
    (draft,) = arch.draft_layers
    # glm4_moe_mtp: the MTP layer is a Glm4MoeDecoderLayer numbered after the target's
    assert (draft.index, draft.kind, draft.num_kv_heads, draft.head_size) == (92, "full", 8, 128)


@pytest.mark.parametrize(("cfg", "total"), [(SCOUT, 109e9), (MAVERICK, 400e9)])
def test_llama4_counts_as_published(cfg: dict[str, Any], total: float) -> None:
    arch = read_arch(cfg)
    # Meta's totals include the vision tower and projector (872M; Scout's language model
    # alone is 107.8B, 1.1% short of 109B)
    assert arch.params.vision == 871_932_416
    assert arch.params.total == pytest.approx(total, rel=0.005)
    assert arch.active_params == pytest.approx(17e9, rel=0.02)


def test_llama4_chunks_every_layer_but_the_nope_ones() -> None:
    arch = read_arch(SCOUT)
    # Llama4TextConfig: every 4th layer NoPE; Llama4Attention: NoPE layers are global
    kinds = [la.kind for la in arch.layers]
    assert kinds[:4] == ["chunked", "chunked", "chunked", "full"]
    assert kinds.count("full") == 12
    assert {la.attention_chunk_size for la in arch.layers if la.kind == "chunked"} == {8192}


# google/gemma-3-4b-it's config.json as published
GEMMA3_4B: dict[str, Any] = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "mm_tokens_per_image": 256,
    "text_config": {
        "hidden_size": 2560,
        "intermediate_size": 10240,
        "model_type": "gemma3_text",
        "num_hidden_layers": 34,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024,
    },
    "torch_dtype": "bfloat16",
    "vision_config": {
        "hidden_size": 1152,
        "image_size": 896,
        "intermediate_size": 4304,
        "model_type": "siglip_vision_model",
        "num_attention_heads": 16,
        "num_hidden_layers": 27,
        "patch_size": 14,
        "vision_use_head": False,
    },
}


def test_gemma3_counts_its_vision_tower() -> None:
    arch = read_arch(GEMMA3_4B)
    # Gemma 3 technical report: a 417M SigLIP encoder beside the 4B language model
    assert arch.params.vision - 1152 * 2560 == pytest.approx(417e6, rel=0.01)
    assert arch.params.total == pytest.approx(4.30e9, rel=0.01)
    text_only = read_arch({**GEMMA3_4B, "architectures": ["Gemma3ForCausalLM"]})
    assert arch.weight_bytes() - text_only.weight_bytes() == 2 * arch.params.vision
    assert any("vision tower" in n for n in arch.notes)


def test_llama4_with_an_eagle_drafter_allocates_chunked_layers_as_full() -> None:
    # VllmConfig.__post_init__: chunked local attention + use_eagle turns the hybrid KV
    # cache manager off; unify_hybrid_kv_cache_specs then promotes chunked to full
    from dataclasses import replace

    from deskside.planner.families.generic_cache import generic_layer_specs
    from deskside.planner.types import Speculative

    s = engine_settings(
        device="gpu",
        tensor_parallel_size=8,
        max_model_len=65536,
        derived_max_model_len=10485760,
        max_num_batched_tokens=8192,
        enforce_eager=False,
    )
    arch = read_arch(SCOUT)
    plain = generic_layer_specs(arch, s)
    assert {sp.type for sp in plain.values()} == {"chunked", "full"}
    eagle = generic_layer_specs(arch, replace(s, speculative=Speculative("eagle", 3)))
    assert {sp.type for sp in eagle.values()} == {"full"}
    assert [sp.page_size_bytes for sp in eagle.values()] == [
        sp.page_size_bytes for sp in plain.values()
    ]


def test_a_vision_tower_deskside_does_not_read_is_said_not_counted() -> None:
    # a LLaVA 1.5 layout: a CLIP tower beside a Llama language model
    llava = {
        "architectures": ["LlavaForConditionalGeneration"],
        "model_type": "llava",
        "text_config": {
            "model_type": "llama",
            "hidden_size": 4096,
            "intermediate_size": 11008,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "vocab_size": 32064,
            "max_position_embeddings": 4096,
        },
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024},
    }
    arch = read_arch(llava)
    assert any("vision tower (vision_config) is not counted" in n for n in arch.notes)
    assert arch.params.vision == 0

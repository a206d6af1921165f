"""The config.json of each tiny model (deskside.tiny): small, but with the traits that
matter to KV-cache planning of the family it stands for. Pure data: each family extends
the shared base (deskside.tiny_common.decoder) with its own fields."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from deskside.tiny_common import decoder
from deskside.tiny_hybrid import nemotron_h, qwen3_next

# The DeepSeek-style MoE the tiny DeepSeek-V3 and GLM-4.5 share: 3 layers (layer 0 dense,
# layers 1-2 MoE: 8 routed experts, 2 active, 1 shared) plus one MTP (next-n) layer.
_ROUTED_MOE: dict[str, Any] = {
    "moe_intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_nextn_predict_layers": 1,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "first_k_dense_replace": 1,
}


def _llama(vocab_size: int) -> dict[str, Any]:
    # 4 layers x 2 KV heads x head_dim 64: 2 x 4 x 2 x 64 x 2 B = 2,048 B of KV per token (bf16).
    return {
        **decoder(vocab_size, "LlamaForCausalLM", "llama"),
        "num_hidden_layers": 4,
        "head_dim": 64,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": None,
        "mlp_bias": False,
        "pretraining_tp": 1,
    }


def _qwen3(vocab_size: int) -> dict[str, Any]:
    # 3 layers x 4 KV heads x head_dim 128 (q/k RMSNorm per head, as in Qwen3).
    return {
        **decoder(vocab_size, "Qwen3ForCausalLM", "qwen3"),
        "num_hidden_layers": 3,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": 3,
        "tie_word_embeddings": True,
    }


def _gemma3(vocab_size: int) -> dict[str, Any]:
    # Text-only Gemma 3: 4 layers, 3 sliding-window (512) + 1 full attention, like the real
    # 5:1 pattern shortened; 2 KV heads x head_dim 128.
    return {
        **decoder(vocab_size, "Gemma3ForCausalLM", "gemma3_text"),
        "num_hidden_layers": 4,
        "head_dim": 128,
        "query_pre_attn_scalar": 128,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": None,
        "sliding_window": 512,
        "layer_types": [
            "sliding_attention",
            "sliding_attention",
            "sliding_attention",
            "full_attention",
        ],
        "attn_logit_softcapping": None,
        "final_logit_softcapping": None,
        "tie_word_embeddings": True,
    }


def _deepseek_v3(vocab_size: int) -> dict[str, Any]:
    # MLA: latent kv_lora_rank 512 + rope 64 = 576 (the only width the CPU MLA kernel takes).
    # The DeepSeek-style MoE above, with one MTP layer for speculative decoding ("mtp").
    return {
        **decoder(vocab_size, "DeepseekV3ForCausalLM", "deepseek_v3"),
        **_ROUTED_MOE,
        "num_key_value_heads": 4,
        "q_lora_rank": 128,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 64,
        "qk_rope_head_dim": 64,
        "v_head_dim": 64,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "routed_scaling_factor": 2.5,
        "moe_layer_freq": 1,
        "ep_size": 1,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "aux_loss_alpha": 0.001,
        "seq_aux": True,
        "pretraining_tp": 1,
    }


def _gpt_oss(vocab_size: int) -> dict[str, Any]:
    # gpt-oss shortened: 4 layers alternating sliding window (128) and full attention, a
    # learned sink per head, every layer MoE (4 experts, 2 active), YaRN RoPE; bf16 weights
    # (the published checkpoint's experts are MXFP4).
    return {
        **decoder(vocab_size, "GptOssForCausalLM", "gpt_oss"),
        "intermediate_size": 256,
        "num_hidden_layers": 4,
        "head_dim": 64,
        "sliding_window": 128,
        "layer_types": [
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "full_attention",
        ],
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "experts_per_token": 2,
        "router_aux_loss_coef": 0.9,
        "output_router_logits": False,
        "hidden_act": "silu",
        "swiglu_limit": 7.0,
        "rms_norm_eps": 1e-5,
        "rope_theta": 150000.0,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": 1024,
        },
        "attention_bias": True,
    }


def _glm4_moe(vocab_size: int) -> dict[str, Any]:
    # GLM-4.5 shortened: the DeepSeek-style MoE above, 2 KV heads x head_dim 128 with half
    # of it rotary.
    return {
        **decoder(vocab_size, "Glm4MoeForCausalLM", "glm4_moe"),
        **_ROUTED_MOE,
        "head_dim": 128,
        "partial_rotary_factor": 0.5,
        "routed_scaling_factor": 1.0,
        "use_qk_norm": False,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": True,
    }


def _kimi_k2(vocab_size: int) -> dict[str, Any]:
    # Kimi K2 is DeepSeek-V3's architecture under its own model_type (vLLM reads it with
    # DeepseekV3Config): the tiny DeepSeek-V3's MLA and MoE, renamed.
    return {**_deepseek_v3(vocab_size), "model_type": "kimi_k2"}


def _llama4(vocab_size: int) -> dict[str, Any]:
    # Llama 4 text shortened: 4 layers, the RoPE ones (0-2) attending within chunks of 512
    # tokens and the NoPE one (3, every 4th) to everything; MoE on layers 1 and 3 (4
    # experts, 1 active, plus the shared expert), dense MLPs on 0 and 2.
    return {
        **decoder(vocab_size, "Llama4ForCausalLM", "llama4_text"),
        "intermediate_size": 128,
        "intermediate_size_mlp": 512,
        "num_hidden_layers": 4,
        "head_dim": 64,
        "attention_chunk_size": 512,
        "no_rope_layers": [1, 1, 1, 0],
        "interleave_moe_layer_step": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
        "use_qk_norm": True,
        "attn_temperature_tuning": False,
        "floor_scale": 8192,
        "attn_scale": 0.1,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": None,
    }


BUILDERS: dict[str, Callable[[int], dict[str, Any]]] = {
    "deepseek-v3": _deepseek_v3,
    "llama": _llama,
    "qwen3": _qwen3,
    "gemma3": _gemma3,
    "gpt-oss": _gpt_oss,
    "glm4-moe": _glm4_moe,
    "kimi-k2": _kimi_k2,
    "llama4": _llama4,
    "qwen3-next": qwen3_next,
    "nemotron-h": nemotron_h,
}

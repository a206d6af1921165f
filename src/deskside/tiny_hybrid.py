"""Tiny hybrid models for vLLM (see deskside.tiny): layers that keep a recurrent state
per request beside a few attention layers. Each builder extends the shared base
(deskside.tiny_common.decoder) and returns its config.json."""

from __future__ import annotations

from typing import Any

from deskside.tiny_common import decoder


def qwen3_next(vocab_size: int) -> dict[str, Any]:
    # Hybrid: 3 gated-delta-net (linear attention) layers then 1 full attention layer
    # (full_attention_interval 4), MoE MLPs (8 experts, 2 active, a shared expert). The
    # linear layers keep a conv state and a recurrent state per request, not a KV cache.
    return {
        **decoder(vocab_size, "Qwen3NextForCausalLM", "qwen3_next"),
        "num_hidden_layers": 4,
        "full_attention_interval": 4,
        "head_dim": 128,
        "partial_rotary_factor": 0.25,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 64,
        "linear_value_head_dim": 64,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 128,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000000.0,
        "rope_scaling": None,
    }


def nemotron_h(vocab_size: int) -> dict[str, Any]:
    # Hybrid: Mamba2 (M), MLP (-) and attention (*) layers, "M-M*": two Mamba2 mixers keep
    # a conv state and an SSM state per request, one attention layer keeps a KV cache.
    return {
        **decoder(vocab_size, "NemotronHForCausalLM", "nemotron_h"),
        "num_hidden_layers": 4,
        "hybrid_override_pattern": "M-M*",
        "head_dim": 64,
        "mamba_num_heads": 8,
        "mamba_head_dim": 32,
        "n_groups": 2,
        "ssm_state_size": 64,
        "conv_kernel": 4,
        "expand": 2,
        "chunk_size": 128,
        "use_conv_bias": True,
        "mamba_hidden_act": "silu",
        "mamba_proj_bias": False,
        "mlp_hidden_act": "relu2",
        "mlp_bias": False,
        "use_bias": False,
        "layer_norm_epsilon": 1e-5,
        "rms_norm_eps": 1e-5,
        "residual_in_fp32": False,
        "rescale_prenorm_residual": True,
    }

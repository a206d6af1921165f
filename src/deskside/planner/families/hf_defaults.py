"""The config values transformers fills in when a config.json leaves a field out.

vLLM reads a model's config through transformers: a published config.json that omits
`vocab_size`, `max_position_embeddings` or the head counts (Gemma 3's nested `text_config`
does) gets the model class's defaults. The planner reads the same values: `with_defaults`
fills what is missing from `DEFAULTS` (generated from transformers by `scripts/hf-defaults`,
constants only; values transformers derives from other fields are derived by the families
themselves). An explicit value, even null, is the config's own and stays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskside.planner.families.hf_defaults_table import DEFAULTS

# the config keys the planner's families read (the ones worth a default)
READ_KEYS = (
    "vocab_size",
    "max_position_embeddings",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "sliding_window",
    "sliding_window_pattern",
    "use_sliding_window",
    "max_window_layers",
    "tie_word_embeddings",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "n_routed_experts",
    "n_shared_experts",
    "first_k_dense_replace",
    "moe_layer_freq",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    # hybrid models' recurrent layers (Qwen3-Next / Qwen3.5 gated delta net, Nemotron-H)
    "linear_conv_kernel_dim",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "decoder_sparse_step",
    "mamba_num_heads",
    "mamba_head_dim",
    "n_groups",
    "ssm_state_size",
    "conv_kernel",
    "mamba_ssm_cache_dtype",
    "moe_shared_expert_intermediate_size",
    "intermediate_size_mlp",
    "interleave_moe_layer_step",
    "attention_chunk_size",
)
# model types vLLM reads with another model type's config class (its _CONFIG_REGISTRY)
CONFIG_OF: dict[str, str] = {"kimi_k2": "deepseek_v3"}
# a default not filled when the config sets the key it names (GptOssConfig.attribute_map:
# num_experts is num_local_experts)
NAMES: dict[str, str] = {"num_experts": "num_local_experts"}


def _table(cfg: Mapping[str, Any]) -> dict[str, object]:
    model_type = str(cfg.get("model_type", ""))
    table = DEFAULTS.get(CONFIG_OF.get(model_type, model_type), {})
    return {k: v for k, v in table.items() if NAMES.get(k) not in cfg}


def with_defaults(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """`cfg` with transformers' defaults for its model_type where a key is missing."""
    defaults = _table(cfg)
    if not defaults:
        return cfg
    return {**defaults, **cfg}


def defaulted(cfg: Mapping[str, Any]) -> list[str]:
    """`key = value` for each key `with_defaults` fills in `cfg` (for the plan's notes)."""
    defaults = _table(cfg)
    return [f"{k} = {v}" for k, v in defaults.items() if k not in cfg]


def _other(value: object) -> object:
    """A different value of the same kind (to see what a default depends on)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 2 if value else 1  # doubled: what divided it still does
    return 6  # None: a plain number stands in


def constant_defaults(model_type: str) -> dict[str, object]:
    """transformers' defaults of `model_type` for READ_KEYS that are constants: a default
    that changes when any other read key is set differently is derived, and left to the
    family. Needs transformers (scripts/hf-defaults, tests)."""
    import sys

    # PyPI's torchvision does not import beside the CPU torch; configs do not need it
    sys.modules.setdefault("torchvision", None)  # type: ignore[arg-type]
    from transformers import AutoConfig

    base = AutoConfig.for_model(model_type)
    derived: set[str] = set()
    for changed in READ_KEYS:
        try:
            other = AutoConfig.for_model(
                model_type, **{changed: _other(getattr(base, changed, None))}
            )
        except Exception:  # any refusal of that value
            continue  # a value that config refuses says nothing about the others
        derived |= {
            k
            for k in READ_KEYS
            if k != changed and getattr(other, k, None) != getattr(base, k, None)
        }
    out: dict[str, object] = {}
    for key in READ_KEYS:
        value = getattr(base, key, None)
        if key not in derived and isinstance(value, (int, float, bool, str)):
            out[key] = value
    return out

"""Reading a Hugging Face `config.json`: typed fields with errors that name the key, the
language-model part of multimodal wrappers, the checkpoint's weight format and the length
limit vLLM derives. Shared by every family's reader. Pure: takes the parsed JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskside.errors import ModelConfigError


def get(cfg: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """cfg[key], or `default` when it is missing or null."""
    value = cfg.get(key, default)
    return default if value is None else value


def get_int(cfg: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """An integer field; a missing one (without default) or a non-integer is a user error."""
    value = cfg.get(key, default)
    if value is None:
        raise ModelConfigError(
            f"config.json has no {key!r}",
            hint="deskside needs it to size the KV cache; is this a causal LM config?",
        )
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise ModelConfigError(f"config.json: {key!r} must be an integer, got {value!r}")
    return int(value)


def text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """Multimodal wrappers keep the language model under text_config."""
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and "num_hidden_layers" in text:
        merged = dict(text)
        merged.setdefault("architectures", cfg.get("architectures"))
        merged.setdefault("torch_dtype", cfg.get("torch_dtype"))
        return merged
    return cfg


def weights_format(cfg: Mapping[str, Any], dtype: str) -> str:
    """The checkpoint's weight format from its quantization_config."""
    q = cfg.get("quantization_config")
    if not isinstance(q, Mapping):
        return "fp16" if dtype in ("float16", "half") else "bf16"
    method = str(q.get("quant_method", "")).lower()
    fmt = str(q.get("fmt", q.get("format", ""))).lower()
    if method == "fp8" or "e4m3" in fmt:
        expert = str(q.get("expert_dtype", q.get("moe_format", ""))).lower()
        return "fp8+mxfp4" if "mxfp4" in expert or "fp4" in expert else "fp8"
    if method in ("mxfp4",):
        return "mxfp4"
    if "nvfp4" in method or "nvfp4" in fmt or method == "modelopt_fp4":
        return "nvfp4"
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).lower()
        return "nvfp4" if "fp4" in algo else "fp8"
    if method == "compressed-tensors":
        text = str(q).lower()
        if "nvfp4" in text or "'num_bits': 4" in text:
            return "nvfp4"
        return "fp8"
    return "bf16"


# Keys vLLM reads for a model's length limit (ModelArchConfigConvertorBase
# .derive_max_model_len_and_key: the smallest one present wins).
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# RoPE types whose max_position_embeddings is already scaled (_get_and_verify_max_len).
UNSCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def derived_max_model_len(cfg: Mapping[str, Any]) -> int:
    """The model's own length limit as vLLM derives it (_get_and_verify_max_len): the
    smallest length key, model_max_length when set, times a RoPE scaling factor unless
    the RoPE type already scaled max_position_embeddings (or the model is Gemma3)."""
    lengths = [int(v) for k in MAX_LEN_KEYS if isinstance(v := cfg.get(k), int | float)]
    derived = min(lengths) if lengths else 2048
    if isinstance(cfg.get("model_max_length"), int):
        derived = int(cfg["model_max_length"])
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if isinstance(rope, Mapping) and "gemma3" not in str(cfg.get("model_type", "")):
        kind = str(rope.get("rope_type", rope.get("type", "default")))
        factor = rope.get("factor")
        if kind not in (*UNSCALED_ROPE, "default") and isinstance(factor, int | float):
            derived = int(derived * factor)
    return derived


def common_fields(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The ModelArch fields every family reads the same way."""
    archs = cfg.get("architectures") or ["?"]
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    return {
        "architecture": str(archs[0]),
        "model_type": str(cfg.get("model_type")),
        "hidden_size": get_int(cfg, "hidden_size"),
        "num_hidden_layers": get_int(cfg, "num_hidden_layers"),
        "num_attention_heads": get_int(cfg, "num_attention_heads"),
        "vocab_size": get_int(cfg, "vocab_size"),
        "max_position_embeddings": derived_max_model_len(cfg),
        "dtype": dtype,
    }

"""Reading a Hugging Face `config.json`: the language-model part of multimodal wrappers,
the fields every family reads the same way (checked: types, ranges, consistency), the
checkpoint's weight format and the length limit vLLM derives. Shared by every family's
reader. Pure: takes the parsed JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskside.planner.bounds import (
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_POSITIONS,
    MAX_ROPE_FACTOR,
    MAX_VOCAB,
)
from deskside.planner.families.config_values import (
    ConfigValueError,
    integer,
    mapping,
    number,
    show,
    text,
)
from deskside.planner.types import DTYPE_BYTES

# Keys of the outer config a multimodal wrapper's text config inherits when it lacks them.
INHERITED_KEYS = ("architectures", "torch_dtype")


def text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """Multimodal wrappers keep the language model under text_config."""
    text = mapping(cfg, "text_config")
    if text is not None and "num_hidden_layers" in text:
        merged = dict(text)
        for key in INHERITED_KEYS:
            merged.setdefault(key, cfg.get(key))
        return merged
    return cfg


def weights_format(cfg: Mapping[str, Any], dtype: str) -> str:
    """The checkpoint's weight format from its quantization_config."""
    q = mapping(cfg, "quantization_config")
    if q is None:
        return "fp16" if dtype in ("float16", "half") else "bf16"

    def field(*keys: str) -> str:
        for key in keys:
            if (value := text(q, key, prefix="quantization_config.")) is not None:
                return str(value).lower()
        return ""

    method = field("quant_method")
    fmt = field("fmt", "format")
    if method == "fp8" or "e4m3" in fmt:
        expert = field("expert_dtype", "moe_format")
        return "fp8+mxfp4" if "mxfp4" in expert or "fp4" in expert else "fp8"
    if method in ("mxfp4",):
        # Mxfp4Config.get_quant_method: only the routed experts are MXFP4; linear layers
        # stay unquantized, in the checkpoint dtype
        return ("fp16" if dtype in ("float16", "half") else "bf16") + "+mxfp4"
    if "nvfp4" in method or "nvfp4" in fmt or method == "modelopt_fp4":
        return "nvfp4"
    if method == "modelopt":
        algo = field("quant_algo")
        return "nvfp4" if "fp4" in algo else "fp8"
    if method == "compressed-tensors":
        described = str(q).lower()
        if "nvfp4" in described or "'num_bits': 4" in described:
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


def rope_scaling(cfg: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """The RoPE scaling object and its key (rope_scaling, or rope_parameters)."""
    for key in ("rope_scaling", "rope_parameters"):
        if rope := mapping(cfg, key):
            return key, rope
    return None


def derived_max_model_len(cfg: Mapping[str, Any]) -> int:
    """The model's own length limit as vLLM derives it (_get_and_verify_max_len): the
    smallest length key, model_max_length when set, times a RoPE scaling factor unless
    the RoPE type already scaled max_position_embeddings (or the model is Gemma3)."""
    lengths = {
        key: integer(cfg, key, 1, MAX_POSITIONS) for key in MAX_LEN_KEYS if cfg.get(key) is not None
    }
    derived = min(lengths.values()) if lengths else 2048
    if "model_max_length" in lengths:
        derived = lengths["model_max_length"]
    found = rope_scaling(cfg)
    if found is None:
        return derived
    key, rope = found
    kind = text(rope, "rope_type", prefix=f"{key}.") or text(rope, "type", prefix=f"{key}.")
    factor = number(rope, "factor", 0.0, MAX_ROPE_FACTOR, None, prefix=f"{key}.")
    if "gemma3" in str(cfg.get("model_type", "")) or factor is None:
        return derived
    if (kind or "default") not in (*UNSCALED_ROPE, "default"):
        scaled = int(derived * factor)
        if not 1 <= scaled <= MAX_POSITIONS:
            raise ConfigValueError(
                f"{key}.factor",
                f"is {show(factor)}: the length limit {derived} x {show(factor)} is "
                f"{scaled}; expected 1 to {MAX_POSITIONS}",
            )
        derived = scaled
    return derived


def checkpoint_dtype(cfg: Mapping[str, Any]) -> str:
    """torch_dtype (or dtype): the checkpoint's dtype name, bfloat16 when unset."""
    for key in ("torch_dtype", "dtype"):
        if value := text(cfg, key, name=True):
            if value not in DTYPE_BYTES:
                raise ConfigValueError(
                    key,
                    f"is {show(value)}; expected one of {', '.join(DTYPE_BYTES)}",
                    hint="the checkpoint's weight dtype, as transformers writes it",
                )
            return str(value)
    return "bfloat16"


def architecture(cfg: Mapping[str, Any]) -> str:
    """The first of `architectures` (the model class), "?" when there is none."""
    archs = cfg.get("architectures")
    if archs is None or archs == []:
        return "?"
    if not isinstance(archs, list):
        raise ConfigValueError(
            "architectures", f"is {show(archs)}; expected a list of model classes"
        )
    return str(text({"architectures[0]": archs[0]}, "architectures[0]", "?", name=True))


def common_fields(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The ModelArch fields every family reads the same way."""
    return {
        "architecture": architecture(cfg),
        "model_type": str(text(cfg, "model_type", "None", name=True)),
        "hidden_size": integer(cfg, "hidden_size", 1, MAX_HIDDEN),
        "num_hidden_layers": integer(cfg, "num_hidden_layers", 1, MAX_LAYERS),
        "num_attention_heads": integer(cfg, "num_attention_heads", 1, MAX_HEADS),
        "vocab_size": integer(cfg, "vocab_size", 1, MAX_VOCAB),
        "max_position_embeddings": derived_max_model_len(cfg),
        "dtype": checkpoint_dtype(cfg),
    }

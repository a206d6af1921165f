"""Which reader a config.json takes, chosen the way vLLM chooses a model's code: by
`architectures` (vLLM's model registry maps the class to a model module,
vllm_architectures.ARCHITECTURES), then by the config's fields.

- a model type deskside lists (generic.MODEL_TYPES, NAMED_TYPES) has its own reader;
- otherwise the class names a vLLM module: a module deskside reads (MODULE_FAMILIES) is
  read by that module's rules; a hybrid or attention-free one (Mamba or linear-attention
  state) is refused; any other attention module is read from its fields
  (by_fields.read_by_fields: kv_lora_rank => MLA, head counts and head_dim => GQA,
  layer_types / sliding_window / attention_chunk_size => which layers slide or chunk);
- a class vLLM has no code for is read from its fields too: vLLM would try its
  Transformers backend, whose attention layers read the same fields.

Pure: takes the parsed JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deskside.errors import ModelConfigError
from deskside.planner.families.config_values import text
from deskside.planner.families.hf_config import architecture
from deskside.planner.families.vllm_architectures import ARCHITECTURES

# Model types whose kv_lora_rank attention vLLM runs as MLA
# (ModelArchConfigConvertorBase.is_deepseek_mla); any other keeps per-head K and V.
MLA_MODEL_TYPES = (
    "axk1",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "deepseek_mtp",
    "glm4_moe_lite",
    "kimi_k2",
    "kimi_linear",
    "longcat_flash",
    "pangu_ultra_moe",
)

# vLLM model module -> the ModelArch.family deskside reads its configs as
MODULE_FAMILIES: dict[str, str] = {
    "llama": "llama",
    "mistral": "mistral",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen2_moe": "qwen2_moe",
    "qwen3_moe": "qwen3_moe",
    "gemma2": "gemma2",
    "gemma3": "gemma3",
    "gemma3_mm": "gemma3",
    "deepseek_v2": "deepseek_v3",  # DeepseekV2/V3ForCausalLM (MLA model types only)
    "gpt_oss": "gpt_oss",
    "glm4_moe": "glm4_moe",
    "llama4": "llama4",
    "mllama4": "llama4",
}
BY_FIELDS = "generic"  # the family of a model read from its fields


@dataclass(frozen=True)
class Choice:
    family: str  # a ModelArch.family (generic.MODEL_TYPES values, NAMED_TYPES, or BY_FIELDS)
    note: str | None = None  # how the reader was chosen, for the plan's notes
    vllm_code: str = ""  # what vLLM runs it with, for refusals


def choose(cfg: Mapping[str, Any], listed: Mapping[str, str]) -> Choice:
    """The reader of a config (its text config for multimodal wrappers) whose model type
    is not in `listed` (model_type -> family) or is. Raises ModelConfigError when vLLM
    would run it with caches deskside does not plan, or could not pick its code."""
    model_type = str(text(cfg, "model_type", "", name=True))
    if model_type in listed:
        return Choice(listed[model_type])
    arch = architecture(cfg)
    if arch == "?":
        raise ModelConfigError(
            f"model_type {model_type!r} is not one deskside can plan: config.json names no "
            "architectures, and vLLM picks a model's code by them (its model registry)",
            hint='add the model class the checkpoint was made with, e.g. "architectures": '
            '["LlamaForCausalLM"]',
        )
    found = ARCHITECTURES.get(arch)
    if found is None:
        return Choice(
            BY_FIELDS,
            f"vLLM has no model code of its own for {arch}: it would run it with its "
            "Transformers backend (when transformers or the checkpoint's code knows the "
            "class), whose attention layers read the same config fields",
            f"its Transformers backend (vLLM has no {arch} code)",
        )
    module, kind = found
    where = f"its {module.removeprefix('vllm.models.')} model code ({arch})"
    if module == "transformers":  # the registry runs these through transformers' code
        where = f"its Transformers backend ({arch})"
    if kind != "attention":
        state = "instead of" if kind == "attention_free" else "beside"
        raise ModelConfigError(
            f"model_type {model_type!r} is not one deskside can plan: vLLM runs it with "
            f"{where}, which keeps a Mamba or linear-attention state {state} a KV cache "
            "(vLLM sizes it with its Mamba state spec); deskside reads that state only for "
            "the hybrid model types it lists (qwen3_next, qwen3_5, nemotron_h)",
            hint="plan it with a model type deskside lists, or size its memory with vLLM "
            "itself (deskside up, then the engine's KV cache line)",
        )
    if module.startswith("vllm.models."):
        raise ModelConfigError(
            f"model_type {model_type!r} is not one deskside can plan: vLLM runs it with "
            f"{where}, which lays out its own caches; deskside reads that layout only for "
            "the model types it lists",
        )
    family = MODULE_FAMILIES.get(module)
    if family == "deepseek_v3":
        if model_type not in MLA_MODEL_TYPES:
            raise ModelConfigError(
                f"model_type {model_type!r} is not one deskside can plan: vLLM runs it "
                f"with {where} but treats only some model types' kv_lora_rank attention "
                "as MLA (is_deepseek_mla), and this is not one of them",
                hint=f"MLA model types: {', '.join(MLA_MODEL_TYPES)}",
            )
        family = "deepseek_v2" if arch == "DeepseekV2ForCausalLM" else "deepseek_v3"
    if family is not None:
        return Choice(
            family,
            f"model_type {model_type!r} read as vLLM's {module} model code reads it ({arch})",
            where,
        )
    return Choice(
        BY_FIELDS,
        f"vLLM runs {arch} with {where}; deskside has no reader of that code and read the "
        "config's attention fields, as vLLM's attention layers take them",
        where,
    )

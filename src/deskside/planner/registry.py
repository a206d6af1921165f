"""The model families the planner knows, and which one a config.json belongs to.

The planner looks a family up once (`family_named(arch.family)`), then asks it for the
model's caches, accounting and non-KV memory. Families never import this module."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from deskside.errors import ModelConfigError
from deskside.planner.families.base import Family
from deskside.planner.families.config_values import text
from deskside.planner.families.deepseek_v4 import DeepseekV4Family
from deskside.planner.families.generic import LISTED_TYPES, GenericFamily
from deskside.planner.families.hf_config import text_config
from deskside.planner.families.hf_defaults import defaulted, with_defaults
from deskside.planner.families.hybrid import HybridFamily
from deskside.planner.families.reader_choice import choose
from deskside.planner.families.vision_tower import vision_tower
from deskside.planner.types import ModelArch

FAMILIES: tuple[Family, ...] = (GenericFamily(), DeepseekV4Family(), HybridFamily())
GENERIC = FAMILIES[0]

# config.json model_type -> its family
_BY_MODEL_TYPE: dict[str, Family] = {t: f for f in FAMILIES for t in f.model_types}
# ModelArch.family -> its family
_BY_ARCH_FAMILY: dict[str, Family] = {a: f for f in FAMILIES for a in f.model_types.values()}


def known_model_types() -> list[str]:
    return sorted(_BY_MODEL_TYPE)


def family_for(cfg: Mapping[str, Any]) -> Family:
    """The family of a parsed config.json (its text config for multimodal wrappers): by
    its model_type when a family lists it, else as vLLM picks the model's code (by its
    architectures, then its fields: families.reader_choice)."""
    if not isinstance(cfg, Mapping):
        raise ModelConfigError("config.json is not a JSON object")
    text_cfg = text_config(cfg)
    model_type = str(text(text_cfg, "model_type", "", name=True))
    family = _BY_MODEL_TYPE.get(model_type)
    if family is None:
        choose(text_cfg, LISTED_TYPES)  # refuses what vLLM runs with caches not planned here
        return GENERIC
    return family


def family_named(name: str) -> Family:
    """The family that reads models of `name` (a ModelArch.family, e.g. "qwen3") or the
    family's own name (e.g. "deepseek_v4")."""
    family = _BY_ARCH_FAMILY.get(name) or next((f for f in FAMILIES if f.name == name), None)
    if family is None:
        raise ModelConfigError(f"no model family {name!r}")
    return family


def read_arch(cfg: Mapping[str, Any]) -> ModelArch:
    """ModelArch from a parsed config.json. Raises ModelConfigError on what it can't read."""
    family = family_for(cfg)
    text = text_config(cfg)
    arch = family.read(with_defaults(text))  # as transformers' config class fills it
    tower = vision_tower(cfg, arch.hidden_size) if text is not cfg else None
    if tower is None and text is not cfg:
        note = (
            "the vision tower (vision_config) is not counted in the weights: vLLM loads it "
            "beside the language model, so the engine holds more than the planned weights"
        )
        arch = replace(arch, notes=(*arch.notes, note))
    elif tower is not None and tower.params:
        vision = tower.params
        default = (
            " (config.json has no vision_config, so vLLM builds transformers' default one)"
            if tower.defaulted
            else ""
        )
        arch = replace(
            arch,
            params=replace(arch.params, vision=vision),
            notes=(
                *arch.notes,
                f"the vision tower and projector ({vision / 1e6:.0f}M parameters){default} "
                "load beside the language model on every GPU (split over tensor parallel); "
                "vLLM skips them only with --limit-mm-per-prompt allowing no images",
            ),
        )
    filled = defaulted(text)
    if not filled:
        return arch
    note = (
        f"not in config.json, so transformers' {arch.model_type} defaults apply, as vLLM "
        f"reads them: {', '.join(filled)}"
    )
    return replace(arch, notes=(*arch.notes, note))

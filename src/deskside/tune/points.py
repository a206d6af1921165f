"""Every point of a grid planned exactly as `deskside plan RECIPE` with the same overrides
plans it: the same planner, the same recipe, the model's config.json read once. No engine.

A point is refused by vLLM (its own refusal, word for word: not enough KV cache for one
request of max_model_len, or a setting vLLM rejects), or by deskside's unified-memory floor
(the headroom a node must keep outside vLLM's budget)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from deskside.errors import DesksideError
from deskside.hardware import PROFILES, HardwareProfile, get_profile
from deskside.planner.inputs import (
    Overrides,
    arch_from_config,
    plan_recipe_arch,
    recipe_model_config,
)
from deskside.planner.plan import Plan
from deskside.planner.types import ModelArch
from deskside.recipe.types import Recipe
from deskside.tune.grid import Base, Grid, Settings, default_grid

FLOOR_WORDS = "unified-memory headroom"  # how the planner's floor refusal begins


class Point(BaseModel):
    """One planned point; `frontier` is set by deskside.tune.pareto."""

    model_config = ConfigDict(extra="forbid")

    settings: dict[str, Any]
    fits: bool
    refusal: str | None
    refused_by: list[str]  # "vllm", "unified-memory floor"
    kv_cache_tokens: int
    max_concurrency: float
    headroom_bytes: int
    headroom_of: str  # "node": memory left outside vLLM's budget; "kv cache": see docs
    max_model_len: int
    frontier: bool = False


def refused_by(refusal: str | None) -> list[str]:
    if refusal is None:
        return []
    parts = refusal.split("\n")
    who = ["vllm" for p in parts if not p.startswith(FLOOR_WORDS)][:1]
    return who + ["unified-memory floor" for p in parts if p.startswith(FLOOR_WORDS)][:1]


def overrides(recipe: Recipe, s: Settings) -> Overrides:
    """The `deskside plan` flags of a point."""
    spec = recipe.engine.speculative
    speculative = None
    if s.num_speculative_tokens is not None and spec is not None:
        speculative = {"method": spec.method, "num_speculative_tokens": s.num_speculative_tokens}
    return Overrides(
        max_model_len=s.max_model_len,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        kv_cache_dtype=s.kv_cache_dtype,
        speculative=speculative,
        gpu_memory_utilization=s.gpu_memory_utilization,
    )


def point_of(s: Settings, plan: Plan) -> Point:
    if plan.memory is not None:
        headroom, of = plan.memory.headroom_bytes, "node"
    else:  # no node total known (a CPU profile): KV memory beyond one full request
        headroom, of = plan.available_kv_bytes - plan.needed_kv_bytes, "kv cache"
    return Point(
        settings=s.to_dict(),
        fits=plan.fits,
        refusal=plan.refusal,
        refused_by=refused_by(plan.refusal),
        kv_cache_tokens=plan.kv_cache_tokens,
        max_concurrency=plan.max_concurrency,
        headroom_bytes=headroom,
        headroom_of=of,
        max_model_len=plan.max_model_len,
    )


def refused_point(s: Settings, error: DesksideError) -> Point:
    """A point vLLM rejects before any memory is counted (its configuration checks)."""
    text = error.message + (f" ({error.hint})" if error.hint else "")
    return Point(
        settings=s.to_dict(),
        fits=False,
        refusal=text,
        refused_by=["vllm"],
        kv_cache_tokens=0,
        max_concurrency=0.0,
        headroom_bytes=0,
        headroom_of="node",
        max_model_len=s.max_model_len,
    )


@dataclass
class Target:
    """A recipe ready to plan many points: its model read once, its base plan made."""

    recipe: Recipe
    recipe_path: Path
    arch: ModelArch
    source: str
    base_plan: Plan

    @classmethod
    def of(cls, recipe: Recipe, recipe_path: Path) -> Target:
        config, source = recipe_model_config(recipe, recipe_path)
        arch = arch_from_config(config, source)
        return cls(recipe, recipe_path, arch, source, plan_recipe_arch(recipe, arch, source))

    def plan(self, s: Settings) -> Plan:
        return plan_recipe_arch(self.recipe, self.arch, self.source, overrides(self.recipe, s))

    def evaluate(self, s: Settings) -> Point:
        try:
            return point_of(s, self.plan(s))
        except DesksideError as exc:
            return refused_point(s, exc)

    @property
    def hardware(self) -> HardwareProfile:
        name = self.recipe.head.hardware
        if name is not None and name in PROFILES:
            return PROFILES[name]
        return get_profile("cpu" if self.recipe.engine.device == "cpu" else "h100-80gb")

    def base(self) -> Base:
        e, p = self.base_plan.engine, self.base_plan
        spec = e.get("speculative")
        gmu_axis = self.recipe.engine.device == "gpu" and self.recipe.engine.kv_cache_memory is None
        return Base(
            max_model_len=p.max_model_len,
            model_max_len=self.arch.max_position_embeddings,
            max_num_seqs=int(e["max_num_seqs"]),
            max_num_batched_tokens=int(e["max_num_batched_tokens"]),
            kv_cache_dtype=self.recipe.engine.kv_cache_dtype,
            num_speculative_tokens=spec["num_speculative_tokens"] if spec else None,
            gpu_memory_utilization=float(e["gpu_memory_utilization"]) if gmu_axis else None,
        )

    def default_grid(self) -> Grid:
        return default_grid(self.base(), self.hardware, self.recipe.guard.min_headroom)


def evaluate_all(
    target: Target, points: Iterable[Settings], progress: Callable[[int], None] | None = None
) -> list[Point]:
    out = []
    for i, s in enumerate(points, 1):
        out.append(target.evaluate(s))
        if progress is not None and i % 1000 == 0:
            progress(i)
    return out

"""`frontier(recipe, path, axes)`: plan every point of the grid and mark the Pareto
frontier. No engine; thousands of points in seconds."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from deskside.recipe.types import Recipe
from deskside.tune.grid import Grid
from deskside.tune.pareto import mark_frontier
from deskside.tune.points import Point, Target, evaluate_all


@dataclass
class Frontier:
    recipe: str
    grid: Grid
    points: list[Point]
    seconds: float
    recipe_settings: dict[str, Any]  # the recipe's own point

    @property
    def on_frontier(self) -> list[Point]:
        return [p for p in self.points if p.frontier]

    def to_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "grid": self.grid.to_dict(),
            "recipe_settings": self.recipe_settings,
            "counts": {
                "points": len(self.points),
                "fit": sum(p.fits for p in self.points),
                "refused_by_vllm": sum("vllm" in p.refused_by for p in self.points),
                "refused_by_floor": sum(
                    "unified-memory floor" in p.refused_by for p in self.points
                ),
                "frontier": sum(p.frontier for p in self.points),
            },
            "seconds": round(self.seconds, 3),
            "points": [p.model_dump(mode="json") for p in self.points],
        }


def frontier(
    recipe: Recipe,
    recipe_path: Path,
    axes: dict[str, tuple[Any, ...]] | None = None,
    progress: Callable[[int], None] | None = None,
    target: Target | None = None,
) -> Frontier:
    """Every point of the recipe's default grid, with the axes in `axes` replaced."""
    t0 = time.perf_counter()
    target = target or Target.of(recipe, recipe_path)
    grid = target.default_grid()
    if axes:
        grid = replace(grid, **axes)
    points = mark_frontier(evaluate_all(target, grid.points(), progress))
    base = target.base()
    own = {
        "max_model_len": base.max_model_len,
        "max_num_seqs": base.max_num_seqs,
        "max_num_batched_tokens": base.max_num_batched_tokens,
        "kv_cache_dtype": base.kv_cache_dtype,
        "num_speculative_tokens": base.num_speculative_tokens,
        "gpu_memory_utilization": base.gpu_memory_utilization,
    }
    return Frontier(recipe.name, grid, points, time.perf_counter() - t0, own)

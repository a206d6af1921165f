"""Time of `deskside tune --frontier` on the flagship recipe for a 2,000-point grid (target:
under 10 s on two cores): every point planned exactly, the Pareto frontier marked.

The grid: 10 context lengths x 5 sequence caps x 4 batch budgets x 2 KV dtypes x 5 draft
tokens = 2,000 points (gpu_memory_utilization kept at the recipe's). Prints the median of
three runs in one process (the model's config read included), then `frontier_seconds:`."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from deskside.recipe.load import load_recipe
from deskside.tune.frontier import frontier

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"

AXES = {
    "max_model_len": tuple(32_768 * k for k in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)),
    "max_num_seqs": (2, 4, 6, 8, 12),
    "max_num_batched_tokens": (4096, 8192, 16_384, 32_768),
    "kv_cache_dtype": ("nvfp4_ds_mla", "fp8_ds_mla"),
    "num_speculative_tokens": (1, 2, 3, 4, 5),
    "gpu_memory_utilization": (0.82,),
}


def main() -> None:
    recipe = load_recipe(RECIPE)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        result = frontier(recipe, RECIPE, AXES)
        times.append(time.perf_counter() - t0)
    counts = result.to_dict()["counts"]
    assert counts["points"] == 2000, counts
    print(f"points: {counts['points']}, fit: {counts['fit']}, frontier: {counts['frontier']}")
    print(f"runs (s): {', '.join(f'{t:.2f}' for t in times)}")
    print(f"per_point_ms: {statistics.median(times) / 2000 * 1000:.3f}")
    print(f"frontier_seconds: {statistics.median(times):.2f}")


if __name__ == "__main__":
    main()

"""Cold and warm time of planning the flagship recipe, and of whole commands as a user
runs them (target: each cold figure under 0.5 s on two cores).

Cold = a fresh Python process importing deskside and planning once; warm = planning again
in the same process; `command_*` = the wall time of a whole `deskside plan RECIPE` and
`deskside --help` process (interpreter start, imports, output). Medians of repeated runs;
the last lines: `command_plan_seconds:`, `command_help_seconds:`, `cold_seconds:`."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"

CHILD = """
import time, sys
t0 = time.perf_counter()
from pathlib import Path
from deskside.recipe.load import load_recipe
from deskside.planner.inputs import plan_recipe
p = Path(sys.argv[1])
plan_recipe(load_recipe(p), p)
print(time.perf_counter() - t0)
"""


def command_seconds(*args: str, runs: int = 7) -> float:
    """Median wall time of `deskside ARGS` in a fresh process (output discarded)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "deskside.cli", *args], capture_output=True, check=True
        )
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    colds = []
    for _ in range(5):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(RECIPE)], capture_output=True, text=True, check=True
        )
        colds.append(float(out.stdout.strip()))
    from deskside.planner.inputs import plan_recipe
    from deskside.recipe.load import load_recipe

    recipe = load_recipe(RECIPE)
    plan_recipe(recipe, RECIPE)
    warms = []
    for _ in range(20):
        t0 = time.perf_counter()
        plan_recipe(load_recipe(RECIPE), RECIPE)
        warms.append(time.perf_counter() - t0)
    print(f"cold runs (s): {', '.join(f'{c:.3f}' for c in colds)}")
    print(f"warm_seconds_median: {statistics.median(warms):.4f}")
    print(f"command_plan_seconds: {command_seconds('plan', str(RECIPE)):.3f}")
    print(f"command_help_seconds: {command_seconds('--help'):.3f}")
    print(f"cold_seconds: {statistics.median(colds):.3f}")


if __name__ == "__main__":
    main()

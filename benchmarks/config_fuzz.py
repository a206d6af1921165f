"""The config.json fuzz of tests/unit/test_config_fuzz.py at full size: at least
EXAMPLES mutated configs per registered family (spread over its model types), each read
and planned as `deskside plan --model-dir` would.

Prints per family: examples, plans (configs that planned), user errors (exit 2), internal
errors (anything else: must be 0), max seconds per example. Exits 1 on any internal error
or an example over the time limit.

    PYTHONPATH=src python benchmarks/config_fuzz.py [EXAMPLES]
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.unit.test_config_fuzz import (  # noqa: E402
    EXAMPLE_SECONDS,
    check_config,
    examples_per_type,
    model_types,
    mutated,
)

EXAMPLES = 5_000


def fuzz_type(family: str, model_type: str, n: int, tally: Counter[str]) -> float:
    """Run `n` examples of `model_type`; count outcomes in `tally`; the slowest example."""
    slowest = 0.0
    shown = 0

    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(mutated(model_type))
    def run(cfg: dict[str, Any]) -> None:
        nonlocal slowest, shown
        t0 = time.perf_counter()
        tally["examples"] += 1
        try:
            tally[check_config(cfg)] += 1
        except Exception:
            tally["internal errors"] += 1
            if shown < 3:
                shown += 1
                print(json.dumps(cfg)[:400], file=sys.stderr)
                traceback.print_exc()
        slowest = max(slowest, time.perf_counter() - t0)

    run()
    return slowest


def main() -> int:
    per_family = int(sys.argv[1]) if len(sys.argv) > 1 else EXAMPLES
    failed = False
    families = sorted({f for f, _ in model_types()})
    print(
        f"{'family':<14} {'examples':>9} {'planned':>8} {'user errors':>12} "
        f"{'internal errors':>16} {'max s/example':>14}"
    )
    for family in families:
        tally: Counter[str] = Counter()
        slowest = 0.0
        for fam, model_type in model_types():
            if fam == family:
                n = examples_per_type(family, per_family)
                slowest = max(slowest, fuzz_type(family, model_type, n, tally))
        print(
            f"{family:<14} {tally['examples']:>9} {tally['planned']:>8} "
            f"{tally['user error']:>12} {tally['internal errors']:>16} "
            f"{slowest:>14.3f}"
        )
        failed |= tally["internal errors"] > 0 or slowest >= EXAMPLE_SECONDS
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

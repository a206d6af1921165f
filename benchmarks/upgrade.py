"""Upgrade under load: `deskside upgrade` of the embedded two-group replica set
(local-replicas: four network namespaces, the real LiteLLM proxy from .venv-proxy) while a
steady open-loop load of chat requests goes through its proxy; how many of them fail (the
target is 0) and how long the upgrade takes.

The engines are deskside's stand-in for vLLM (tests/stand_in_engine.py: it answers each
request after --delay seconds); what is measured is the orchestration: the drain at the
set's gate, each group's stop, start and proof, the return to the rotation. The upgrade
changes engine.env (DESKSIDE_RELEASE 1 -> 2), which restarts every engine.

Run as root: python benchmarks/upgrade.py [--rate 8] [--delay 0.2]
The last two lines are `failed_requests: <int>` and `upgrade_seconds: <float>`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from tests.upgrade_load import PROXY, OpenLoad, can_run, cli, master_key, set_recipe


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=8.0, help="requests per second")
    parser.add_argument(
        "--delay", type=float, default=0.2, help="the stand-in's seconds per request"
    )
    args = parser.parse_args()
    ok, why = can_run()
    if not ok:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="deskside-upgrade-") as tmp:
        home, folder = Path(tmp) / "home", Path(tmp) / "recipes"
        folder.mkdir()
        first = set_recipe(folder, "1", args.delay)
        second = set_recipe(folder, "2", args.delay)
        r = cli(home, "up", str(first), "--json", timeout=600)
        if r.returncode != 0:
            print(r.stdout[-3000:] + r.stderr[-3000:], file=sys.stderr)
            return 1
        try:
            with OpenLoad(PROXY, master_key(home), rate=args.rate) as load:
                time.sleep(3)
                t0 = time.monotonic()
                r = cli(home, "upgrade", str(second), "--json", timeout=900)
                seconds = time.monotonic() - t0
                time.sleep(3)
        finally:
            cli(home, "down", "local-replicas", timeout=300)
        if r.returncode != 0:
            print(r.stdout[-3000:] + r.stderr[-3000:], file=sys.stderr)
            return 1
        report = json.loads(r.stdout)
        for step in report["groups"]:
            before, after = step["before"]["median_s"], step["after"]["median_s"]
            print(
                f"group {step['group']}: drained {step['drain_seconds']:.2f} s, restarted "
                f"{step['upgrade_seconds']:.1f} s, bench median "
                f"{before * 1000:.0f} -> {after * 1000:.0f} ms"
            )
        for failure in load.failures[:5]:
            print(f"failed: {failure}")
        print(
            f"load: {args.rate:g} requests/s open loop, {load.sent} sent, {load.answered} answered"
        )
        print(f"failed_requests: {len(load.failures)}")
        print(f"upgrade_seconds: {seconds:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

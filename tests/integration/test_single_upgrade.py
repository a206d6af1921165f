"""`deskside upgrade` of a one-group recipe (the embedded local-tiny: two network-namespace
nodes, TP=2, the real LiteLLM proxy, the stand-in engine) under a steady open-loop load
through the proxy: a blue/green restart. A changed setting is upgraded with no client
request failing and the run then serves from the new copy (its record says so, `down`
leaves nothing); a new copy that fails its proof (benched under the live load after the
switch: 4x slower) is switched away from at the gate and stopped, and the old one serves
on, again with no request failing.

Needs root, iproute2 and the LiteLLM proxy in .venv-proxy (scripts/bootstrap --with-proxy)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deskside.home import embedded_recipes
from deskside.planner.inputs import plan_recipe
from deskside.recipe.load import load_recipe
from deskside.tiny import write_tiny_model

from ..stand_in_engine import stand_in
from ..upgrade_load import (
    PROXY_BIN,
    OpenLoad,
    cli,
    head_state,
    master_key,
    release_of,
    run_json,
    upgrade_under_load,
)

# one worker runs a module's tests in order (scripts/run-tests: --dist loadfile; pytest 9.2
# ignores xdist 3.8's group marks): the tests share a module fixture's run and its network
# namespaces, and one test builds on the one before
pytestmark = pytest.mark.integration

NAME = "local-tiny"
# the run's own namespaces, veths and addresses: never those of a local-tiny run that is up
# on this machine, or of another test's
NAMESPACES = ("ds-sug0", "ds-sug1")
HEAD = "10.78.0.1"
PROXY = f"http://{HEAD}:4000"
MODELS = ("deepseek-v4-flash-tiny", "tiny")


def tiny_recipe(folder: Path, version: str, delay: float) -> Path:
    """local-tiny run by the stand-in engine at `version` (DESKSIDE_RELEASE in engine.env),
    `delay` seconds per request; with its monitoring (Prometheus on the head), no watch."""
    text = embedded_recipes()[NAME]
    for old, new in (("10.77.0.", "10.78.0."), ("ds-node", "ds-sug"), ("ds-veth", "ds-suv")):
        assert old in text
        text = text.replace(old, new)
    python = folder / "stand-in" / "python"
    assert "\nruntime:\n" in text
    text = text.replace("\nruntime:\n", f"\nruntime:\n  python: {python}\n", 1)
    env = '  env:\n    HF_HUB_OFFLINE: "1"'
    assert env in text
    text = text.replace(
        env, env + f'\n    DESKSIDE_RELEASE: "{version}"\n    STAND_IN_DELAY: "{delay}"'
    )
    text = text[: text.index("\nsurvive:") + 1]  # no watcher (survive's default: off)
    model = folder / "models" / "tiny-deepseek-v3"
    if not (model / "config.json").is_file():
        write_tiny_model("deepseek-v3", model)
    path = folder / f"{NAME}-{version}.yaml"
    path.write_text(text)
    if not python.exists():
        stand_in(python.parent, plan_recipe(load_recipe(path), path).kv_cache_line)
    return path


def engine_pids(home: Path) -> list[int]:
    run = run_json(home, NAME)
    pids = []
    for n in run["nodes"]:
        state = json.loads((Path(n["recipe_dir"]) / "state.json").read_text())
        pids.append(int(state["pid"]))
    return pids


def alive(pid: int) -> bool:
    """The process runs (a zombie has ended: only its parent's reaping is left)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def gone(pids: list[int], seconds: float = 10.0) -> bool:
    """Every pid's process has ended (a stopped process is reaped a moment later)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not [p for p in pids if alive(p)]:
            return True
        time.sleep(0.2)
    return False


def scraped_engines(seconds: float = 0.0, want: str | None = None) -> list[tuple[str, str]]:
    """(scrape URL, health) of Prometheus's `vllm` targets; with `want`, polled for up to
    `seconds` until that port's target is the only one and is up."""
    deadline = time.monotonic() + seconds
    while True:
        r = httpx.get(f"http://{HEAD}:9090/api/v1/targets", params={"state": "active"}, timeout=5)
        targets = [
            (t["scrapeUrl"], t["health"])
            for t in r.json()["data"]["activeTargets"]
            if t["labels"].get("job") == "vllm"
        ]
        if want is None or time.monotonic() > deadline:
            return targets
        if [(u.split("/")[2].rsplit(":", 1)[1], h) for u, h in targets] == [(want, "up")]:
            return targets
        time.sleep(1)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    if not (PROXY_BIN / "litellm").exists():
        pytest.skip(f"litellm is not installed in {PROXY_BIN}")
    home = tmp_path_factory.mktemp("home")
    folder = tmp_path_factory.mktemp("recipes")
    first = tiny_recipe(folder, "1", 0.2)
    r = cli(home, "up", str(first), "--json", timeout=600)
    downed = False
    try:
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
        yield home, folder
        pids = engine_pids(home)
        down = cli(home, "down", NAME, "--json", timeout=300)
        downed = True
        assert down.returncode == 0, down.stdout + down.stderr
        # nothing left: no engine, no namespace, no record of the run
        assert gone(pids), pids
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not set(NAMESPACES) & set(listed.split())
        assert not (home / "runs" / NAME / "run.json").exists()
    finally:
        if not downed:
            cli(home, "down", NAME, timeout=300)


def test_a_blue_green_upgrade_under_load_fails_no_request(running: tuple[Path, Path]) -> None:
    home, folder = running
    assert release_of(home, NAME) == "1"
    assert run_json(home, NAME)["api_url"] == f"http://{HEAD}:8888"
    blue = engine_pids(home)
    assert scraped_engines(60, want="8888") == [(f"http://{HEAD}:8888/metrics", "up")]
    second = tiny_recipe(folder, "2", 0.2)
    # the load runs 3 s before the upgrade begins and 3 s after it ends
    load = OpenLoad(PROXY, master_key(home, NAME), rate=8, models=MODELS)
    r, seconds = upgrade_under_load(home, second, load, settle=3, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    report = json.loads(r.stdout)
    print(f"upgrade_seconds: {seconds:.1f}; sent {load.sent}, failed {len(load.failures)}")
    assert load.failures == [], load.failures[:5]
    assert load.answered == load.sent and load.sent >= 8 * seconds
    assert report["kind"] == "blue/green" and report["ok"], report
    assert report["switched_back"] is False
    assert report["blue"] == f"http://{HEAD}:8888"
    assert report["green"] == f"http://{HEAD}:9888"  # slot b: engine.port + 1000
    assert report["before"]["failed"] == 0 and report["after"]["failed"] == 0
    # the run serves from green: its record, its state, its engine's environment
    assert run_json(home, NAME)["api_url"] == f"http://{HEAD}:9888"
    assert run_json(home, NAME)["engine_overlay"] == {"port": 9888}  # a restart in place: there
    assert release_of(home, NAME) == "2"
    assert gone(blue), blue  # blue is stopped
    # Prometheus follows the engine to green's port (its target file), with no restart
    assert scraped_engines(60, want="9888") == [(f"http://{HEAD}:9888/metrics", "up")]
    assert {s["name"] for s in head_state(home, NAME)["services"]} >= {"proxy", "gate"}
    status = cli(home, "status", NAME, "--json", timeout=120)
    assert status.returncode == 0, status.stdout + status.stderr


def test_a_green_failing_its_proof_is_stopped_and_blue_serves_on(
    running: tuple[Path, Path],
) -> None:
    home, folder = running
    before = run_json(home, NAME)["api_url"]
    release = release_of(home, NAME)  # "2" after the test before; "1" when it runs alone
    slower = tiny_recipe(folder, "3", 0.8)  # 4x the stand-in's time per request
    load = OpenLoad(PROXY, master_key(home, NAME), rate=4, models=MODELS)
    r, _ = upgrade_under_load(home, slower, load, settle=2, timeout=600)
    assert r.returncode == 1, r.stdout[-4000:] + r.stderr[-4000:]
    report = json.loads(r.stdout)
    assert load.failures == [], load.failures[:5]
    assert not report["ok"] and "median latency" in report["error"], report
    # green was proven under the live load after the switch, then the gate switched back
    assert report["switched_back"] is True and "over blue's" in report["error"], report
    # nothing switched: the same engine serves, green's processes are gone
    assert run_json(home, NAME)["api_url"] == before
    assert release in ("1", "2") and release_of(home, NAME) == release
    port = str(before).rsplit(":", 1)[1]
    assert scraped_engines() == [(f"http://{HEAD}:{port}/metrics", "up")]
    green_port = "8888" if str(before).endswith(":9888") else "9888"
    listening = subprocess.run(
        ["ip", "netns", "exec", NAMESPACES[0], "ss", "-Hltn", f"sport = :{green_port}"],
        capture_output=True,
        text=True,
    ).stdout
    assert listening.strip() == "", listening

"""`deskside upgrade` of the embedded two-group replica set (four network namespaces, the
real LiteLLM proxy, the stand-in engine: `tests/upgrade_load.py`) under a steady open-loop
load through the proxy: every group drained at the gate, upgraded, proven and put back with
no client request failing; then an upgrade whose first group fails its proof (the bench 4x
slower) is rolled back there and stops, again with no request failing.

Needs root, iproute2 and the LiteLLM proxy in .venv-proxy (scripts/bootstrap --with-proxy)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..upgrade_load import (
    PROXY,
    OpenLoad,
    can_run,
    cli,
    head_release,
    master_key,
    set_recipe,
    upgrade_under_load,
)

# one worker runs a module's tests in order (scripts/run-tests: --dist loadfile; pytest 9.2
# ignores xdist 3.8's group marks): the tests share a module fixture's run and its network
# namespaces, and one test builds on the one before
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    ok, why = can_run()
    if not ok:
        pytest.skip(why)
    home = tmp_path_factory.mktemp("home")
    folder = tmp_path_factory.mktemp("recipes")
    first = set_recipe(folder, "1", 0.2)
    r = cli(home, "up", str(first), "--json", timeout=600)
    try:
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
        yield home, folder
    finally:
        down = cli(home, "down", "local-replicas", timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr


def test_an_upgrade_under_load_fails_no_request(running: tuple[Path, Path]) -> None:
    home, folder = running
    assert head_release(home, "a") == "1" and head_release(home, "b") == "1"
    second = set_recipe(folder, "2", 0.2)
    # the load runs 3 s before the upgrade begins and 3 s after it ends
    load = OpenLoad(PROXY, master_key(home), rate=8)
    r, seconds = upgrade_under_load(home, second, load, settle=3, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    report = json.loads(r.stdout)
    print(f"upgrade_seconds: {seconds:.1f}; sent {load.sent}, failed {len(load.failures)}")
    assert load.failures == [], load.failures[:5]
    assert load.answered == load.sent and load.sent >= 8 * seconds
    steps = report["groups"]
    assert [s["group"] for s in steps] == ["a", "b"] and all(s["ok"] for s in steps), steps
    for s in steps:
        # the bench before and after, on the same workload, both clean
        assert s["before"]["failed"] == 0 and s["after"]["failed"] == 0, s
        assert s["before"]["workload"] == s["after"]["workload"]
        # its start recorded as an upgrade, phase by phase
        assert s["startup"]["kind"] == "upgrade" and "health" in s["startup"]["seconds"], s
    assert head_release(home, "a") == "2" and head_release(home, "b") == "2"


def test_a_group_failing_its_proof_is_rolled_back_and_the_upgrade_stops(
    running: tuple[Path, Path],
) -> None:
    home, folder = running
    slower = set_recipe(folder, "3", 0.8)  # 4x the stand-in's time per request
    load = OpenLoad(PROXY, master_key(home), rate=8)
    r, _ = upgrade_under_load(home, slower, load, settle=2, timeout=900)
    assert r.returncode == 1, r.stdout[-4000:] + r.stderr[-4000:]
    report = json.loads(r.stdout)
    assert load.failures == [], load.failures[:5]
    (step,) = report["groups"]  # stopped at the first group
    assert step["group"] == "a" and not step["ok"] and step["rolled_back"], step
    assert "median latency" in step["error"], step
    assert "group a failed its proof" in report["error"]
    # group a runs the previous recipe again; group b was never touched
    assert head_release(home, "a") == "2" and head_release(home, "b") == "2"

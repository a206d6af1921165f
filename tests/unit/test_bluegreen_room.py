"""Whether a one-group recipe's nodes can hold a second copy of its engine beside the running
one (`deskside.replicas.bluegreen.green_room`), from the planner's own figures: the flagship
(one DeepSeek-V4-Flash per GB10 pair) cannot, a TP=2 PP=2 plan fits twice on H200s and
not on GB10s; the CPU recipe fits when the machine has its two ranks' KV cache
space and weights available beside the floor, and not otherwise."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from deskside.planner.inputs import Overrides, plan_recipe
from deskside.recipe.load import load_recipe
from deskside.replicas.bluegreen import HOW_INSTEAD, NoRoom, blue_green_refusal, green_room
from deskside.tiny import write_tiny_model

RECIPES = Path(__file__).parents[2] / "recipes"
FLAGSHIP = RECIPES / "dual-spark-deepseek-v4-flash.yaml"
GIB = 1 << 30


def test_the_flagship_has_no_room_for_a_second_copy() -> None:
    recipe = load_recipe(FLAGSHIP)
    plan = plan_recipe(recipe, FLAGSHIP)
    assert plan.memory is not None and plan.memory.unified
    room = green_room(recipe, plan, plan)
    assert not room.fits
    assert [n.where for n in room.nodes] == ["ai1", "ai2"]
    for n in room.nodes:
        # GB10: 121.6 GiB; each copy's budget and what it holds outside: 99.71 GiB
        assert n.total_bytes == int(121.6 * GIB)
        assert round(n.blue_bytes / GIB, 2) == round(n.green_bytes / GIB, 2) == 99.71
        assert n.floor_bytes == 21 * GIB
    assert room.reason is not None
    assert "ai1: the running engine takes 99.71 GiB, the new one needs 99.71 GiB" in room.reason
    assert "220.42 GiB of 121.60 GiB" in room.reason


def test_the_refusal_says_why_and_what_to_do_instead() -> None:
    recipe = load_recipe(FLAGSHIP)
    plan = plan_recipe(recipe, FLAGSHIP)
    refusal = blue_green_refusal(recipe, plan, plan, None, allow_downtime=False)
    assert isinstance(refusal, NoRoom) and refusal.exit_code == 2
    assert "220.42 GiB of 121.60 GiB" in refusal.message
    assert refusal.hint == HOW_INSTEAD and "replica set" in HOW_INSTEAD
    data = refusal.to_dict()
    assert data["reason"] == refusal.room.reason if refusal.room else False
    assert data["room"]["fits"] is False  # type: ignore[index]


def test_room_on_a_larger_device_and_none_on_gb10() -> None:
    quad = RECIPES / "quad-spark-tp2-pp2.yaml"
    recipe = load_recipe(quad)
    h200 = Overrides(hardware="h200-141gb", gpu_memory_utilization=0.45, max_model_len=32768)
    big = plan_recipe(recipe, quad, h200)
    assert big.fits and big.memory is not None
    room = green_room(recipe, big, big)
    assert room.fits, room.reason
    for n in room.nodes:
        # 0.45 x 139.8 GiB = 62.9 GiB budget each, two copies under 139.8 GiB (floor 0)
        assert 62.9 * GIB < n.green_bytes < 63.5 * GIB and n.floor_bytes == 0
        assert n.blue_bytes + n.green_bytes <= n.total_bytes
    # the same plan on GB10 (0.48 x 121.6 GiB = 58.4 GiB each) fits alone, not twice with
    # the 21 GiB floor
    gb10 = plan_recipe(recipe, quad, Overrides(gpu_memory_utilization=0.48, max_model_len=32768))
    assert gb10.fits
    room = green_room(recipe, gb10, gb10)
    assert not room.fits and "of 121.60 GiB" in (room.reason or "")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny")
    shutil.copy(RECIPES / "local-tiny.yaml", folder / "local-tiny.yaml")
    write_tiny_model("deepseek-v3", folder / "models" / "tiny-deepseek-v3")
    return folder / "local-tiny.yaml"


def test_cpu_green_needs_its_kv_cache_space_and_weights_per_rank(tiny: Path) -> None:
    recipe = load_recipe(tiny)
    plan = plan_recipe(recipe, tiny)
    assert plan.memory is None  # CPU: the plan sizes no device memory
    on = {"node0": "this machine", "node1": "this machine"}
    weights = sum(r.weights_bytes for r in plan.ranks)
    assert len(plan.ranks) == 2 and 0 < weights < 64 << 20
    # two ranks of kv_cache_memory 1 GiB, their weights, and the 2 GiB floor of the cpu profile
    enough = {"this machine": 4 * GIB + weights}
    room = green_room(recipe, plan, plan, enough, on)
    assert room.fits, room.reason
    (n,) = room.nodes
    assert n.where == "this machine (node0, node1)" and n.green_bytes == 2 * GIB + weights
    short = {"this machine": 4 * GIB + weights - 1}
    room = green_room(recipe, plan, plan, short, on)
    assert not room.fits and room.reason is not None
    assert "this machine (node0, node1): the new engine needs 2.0" in room.reason
    assert "available now" in room.reason
    unknown = green_room(recipe, plan, plan, {}, on)
    assert not unknown.fits and "unknown" in (unknown.reason or "")


def test_without_the_proxy_the_switch_cannot_be_hitless(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "deskside.replicas.bluegreen.available_now",
        lambda recipe, known_hosts: (
            {"this machine": 16 * GIB},
            {"node0": "this machine", "node1": "this machine"},
        ),
    )
    text = tiny.read_text().replace("proxy:\n", "proxy:\n  enabled: false\n", 1)
    text = text.replace("  enabled: true\n\nmonitoring", "\nmonitoring", 1)
    direct = tiny.with_name("direct.yaml")
    direct.write_text(text)
    recipe = load_recipe(direct)
    assert not recipe.runs_proxy
    plan = plan_recipe(recipe, direct)
    refusal = blue_green_refusal(recipe, plan, plan, None, allow_downtime=False)
    assert refusal is not None and "requests fail while it moves" in refusal.message
    assert blue_green_refusal(recipe, plan, plan, None, allow_downtime=True) is None


def test_upgrade_of_the_running_flagship_is_refused_with_exit_2(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    import deskside.replicas.upgrade
    import deskside.runtime.local  # noqa: F401  (bound to the real load_run before the patch)
    from deskside.cli.upgrade import single_group

    running = SimpleNamespace(recipe=str(FLAGSHIP))
    monkeypatch.setattr("deskside.records.run.load_run", lambda name: running)
    monkeypatch.setattr("deskside.replicas.upgrade.running_recipe", lambda name: None)
    with pytest.raises(NoRoom) as caught:
        single_group(load_recipe(FLAGSHIP), FLAGSHIP, None)
    assert caught.value.exit_code == 2
    assert "no blue/green restart" in caught.value.message
    assert "220.42 GiB of 121.60 GiB" in str(caught.value.to_dict()["reason"])

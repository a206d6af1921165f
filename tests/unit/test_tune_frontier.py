"""deskside.tune: the grid, the frontier (pure), and every point's verdict against
`deskside plan` with the same overrides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deskside.hardware import get_profile
from deskside.home import resolve_recipe
from deskside.planner.inputs import Overrides, plan_recipe
from deskside.recipe.load import load_recipe
from deskside.recipe.types import Recipe
from deskside.tune.frontier import frontier
from deskside.tune.grid import gmu_ceiling, parse_axis
from deskside.tune.pareto import frontier_flags
from deskside.tune.points import Point, Target

from ..cli_process import deskside

ROOT = Path(__file__).parents[2]
FLAGSHIP = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"
GIB = 1 << 30


def point(fits: bool = True, **s: Any) -> Point:
    settings = {
        "max_model_len": 4096,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 2048,
        "kv_cache_dtype": "auto",
        "num_speculative_tokens": None,
        "gpu_memory_utilization": None,
    }
    conc = s.pop("conc", 1.0)
    headroom = s.pop("headroom", 0)
    settings.update(s)
    return Point(
        settings=settings,
        fits=fits,
        refusal=None if fits else "no",
        refused_by=[] if fits else ["vllm"],
        kv_cache_tokens=1000,
        max_concurrency=conc,
        headroom_bytes=headroom,
        headroom_of="node",
        max_model_len=settings["max_model_len"],
    )


def test_pareto_dominance_within_speed_settings() -> None:
    pts = [
        point(max_model_len=4096, max_num_seqs=4, conc=2.0),  # dominated by the next
        point(max_model_len=4096, max_num_seqs=8, conc=2.0),
        point(max_model_len=8192, max_num_seqs=8, conc=1.0),  # trades context for conc.
        point(fits=False, max_model_len=16384, max_num_seqs=8, conc=9.0),  # refused: never
        # another batch budget is judged only against its own kind
        point(max_model_len=2048, max_num_seqs=2, max_num_batched_tokens=4096, conc=0.5),
        point(max_model_len=4096, max_num_seqs=8, conc=2.0, headroom=-1),  # less headroom
    ]
    assert frontier_flags(pts) == [False, True, True, False, True, False]


def test_pareto_keeps_equal_points() -> None:
    a = point(max_model_len=4096, max_num_seqs=8, conc=2.0)
    b = point(max_model_len=4096, max_num_seqs=8, conc=2.0, kv_cache_dtype="auto")
    assert frontier_flags([a, b]) == [True, True]


def test_parse_axis() -> None:
    assert parse_axis("8192, 4096,4_096", "--x", int) == (4096, 8192)
    assert parse_axis("auto,fp8", "--x", str) == ("auto", "fp8")
    for bad, kind in (("a", int), ("0", int), ("1.5", float), (",", int)):
        with pytest.raises(Exception, match="--x"):
            parse_axis(bad, "--x", kind)


def test_flagship_default_grid_surrounds_the_recipe_and_keeps_the_floor() -> None:
    target = Target.of(load_recipe(FLAGSHIP), FLAGSHIP)
    grid = target.default_grid()
    assert 204_800 in grid.max_model_len and 1_048_576 in grid.max_model_len
    assert 6 in grid.max_num_seqs and 16_384 in grid.max_num_batched_tokens
    assert grid.kv_cache_dtype == ("nvfp4_ds_mla", "fp8_ds_mla")
    assert grid.num_speculative_tokens == (4, 5, 6)
    # GB10: 121.6 GiB, floor 21 GiB -> at most 0.82 (0.827 rounded down)
    assert gmu_ceiling(get_profile("gb10"), None) == 0.82
    assert grid.gpu_memory_utilization == (0.76, 0.78, 0.8, 0.82)


def test_flagship_frontier_holds_the_articles_context_and_refuses_one_million() -> None:
    recipe = load_recipe(FLAGSHIP)
    result = frontier(
        recipe,
        FLAGSHIP,
        {
            "max_model_len": (204_800, 1_048_576),
            "max_num_seqs": (6,),
            "max_num_batched_tokens": (16_384,),
            "kv_cache_dtype": ("nvfp4_ds_mla",),
            "num_speculative_tokens": (5,),
            "gpu_memory_utilization": (0.82, 0.835),
        },
    )
    by = {
        (p.settings["max_model_len"], p.settings["gpu_memory_utilization"]): p
        for p in result.points
    }
    ours = by[(204_800, 0.82)]
    # the figures docs/flagship.md #10/#11 quote from `deskside plan`
    assert ours.fits and ours.kv_cache_tokens == 311_049 and ours.max_concurrency == 1.5188
    assert round(ours.headroom_bytes / GIB, 2) == 21.89 and ours.frontier
    assert by[(1_048_576, 0.82)].refused_by == ["vllm"]
    assert "estimated maximum model length is 623872" in str(by[(1_048_576, 0.82)].refusal)
    assert by[(204_800, 0.835)].refused_by == ["unified-memory floor"]
    # 1.5 GiB more for vLLM holds one 1,048,576-token request, past the floor
    assert by[(1_048_576, 0.835)].refused_by == ["unified-memory floor"]


def _same_as_plan(recipe: Recipe, recipe_path: Path, s: dict[str, Any], p: Point) -> None:
    """The point against `plan_recipe` with Overrides spelled out here (as the flags of
    `deskside plan` are)."""
    spec = recipe.engine.speculative
    o = Overrides(
        max_model_len=s["max_model_len"],
        max_num_seqs=s["max_num_seqs"],
        max_num_batched_tokens=s["max_num_batched_tokens"],
        kv_cache_dtype=s["kv_cache_dtype"],
        speculative=(
            {"method": spec.method, "num_speculative_tokens": s["num_speculative_tokens"]}
            if spec is not None
            else None
        ),
        gpu_memory_utilization=s["gpu_memory_utilization"],
    )
    try:
        plan = plan_recipe(recipe, recipe_path, o)
    except Exception as exc:  # vLLM's configuration checks: refused before memory
        assert not p.fits and p.refused_by == ["vllm"]
        assert str(getattr(exc, "message", exc)) in str(p.refusal)
        return
    assert p.fits == plan.fits
    assert p.refusal == plan.refusal
    assert p.kv_cache_tokens == plan.kv_cache_tokens
    assert p.max_concurrency == plan.max_concurrency
    assert p.max_model_len == plan.max_model_len
    if plan.memory is not None:
        assert p.headroom_bytes == plan.memory.headroom_bytes


def subset(values: list[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(st.sampled_from(values), min_size=1, max_size=2, unique=True).map(
        lambda v: tuple(sorted(v, key=str))
    )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lens=subset([4096, 65_536, 131_072, 204_800, 409_600, 623_872, 623_873, 1_048_576, 2_000_000]),
    seqs=subset([1, 6, 10, 64, 512]),
    batched=subset([2048, 8192, 16_384, 65_536]),
    dtypes=subset(["nvfp4_ds_mla", "fp8_ds_mla", "auto", "fp8"]),
    spec=subset([1, 5, 9]),
    gmu=subset([0.5, 0.76, 0.82, 0.83, 0.9]),
)
def test_every_flagship_point_is_the_plan(
    lens: tuple[int, ...],
    seqs: tuple[int, ...],
    batched: tuple[int, ...],
    dtypes: tuple[str, ...],
    spec: tuple[int, ...],
    gmu: tuple[float, ...],
) -> None:
    axes = {
        "max_model_len": lens,
        "max_num_seqs": seqs,
        "max_num_batched_tokens": batched,
        "kv_cache_dtype": dtypes,
        "num_speculative_tokens": spec,
        "gpu_memory_utilization": gmu,
    }
    recipe = load_recipe(FLAGSHIP)
    result = frontier(recipe, FLAGSHIP, axes)
    assert len(result.points) == len(lens) * len(seqs) * len(batched) * len(dtypes) * len(
        spec
    ) * len(gmu)
    for p in result.points:
        assert not p.frontier or p.fits
        _same_as_plan(recipe, FLAGSHIP, p.settings, p)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lens=subset([16, 1024, 4096, 32_768, 32_769, 100_000]),
    seqs=subset([1, 6, 256]),
    batched=subset([16, 1024, 4096, 70_000]),
    dtypes=subset(["auto", "fp8", "bfloat16", "fp8_e5m2"]),
    spec=subset([1, 3, 7]),
)
def test_every_tiny_point_is_the_plan(
    lens: tuple[int, ...],
    seqs: tuple[int, ...],
    batched: tuple[int, ...],
    dtypes: tuple[str, ...],
    spec: tuple[int, ...],
) -> None:
    recipe, path = resolve_recipe("local-tiny")
    axes = {
        "max_model_len": lens,
        "max_num_seqs": seqs,
        "max_num_batched_tokens": batched,
        "kv_cache_dtype": dtypes,
        "num_speculative_tokens": spec,
    }
    for p in frontier(recipe, path, axes).points:
        _same_as_plan(recipe, path, p.settings, p)


def test_cli_frontier_json_matches_the_plan_command() -> None:
    """Through the real entry points: `tune --frontier --json`, then `plan --json` with the
    same flags for a frontier point and a refused one."""
    r = deskside(
        "tune",
        str(FLAGSHIP),
        "--frontier",
        "--json",
        "--max-model-len",
        "204800,1048576",
        "--max-num-seqs",
        "6",
        "--max-num-batched-tokens",
        "16384",
        "--kv-cache-dtype",
        "nvfp4_ds_mla",
        "--num-speculative-tokens",
        "5",
        "--gpu-memory-utilization",
        "0.82",
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    keys = {"settings", "fits", "refusal", "kv_cache_tokens", "max_concurrency", "frontier"}
    assert all(keys | {"headroom_bytes"} <= set(p) for p in data["points"])
    for p in data["points"]:
        s = p["settings"]
        plan = deskside(
            "plan",
            str(FLAGSHIP),
            "--json",
            "--max-model-len",
            str(s["max_model_len"]),
            "--max-num-seqs",
            str(s["max_num_seqs"]),
            "--max-num-batched-tokens",
            str(s["max_num_batched_tokens"]),
            "--kv-cache-dtype",
            s["kv_cache_dtype"],
            "--speculative",
            json.dumps({"method": "dspark", "num_speculative_tokens": s["num_speculative_tokens"]}),
            "--gpu-memory-utilization",
            str(s["gpu_memory_utilization"]),
        )
        answer = json.loads(plan.stdout)
        assert plan.returncode == (0 if p["fits"] else 3)
        assert answer["fits"] == p["fits"] and answer["refusal"] == p["refusal"]
        assert answer["kv_cache_tokens"] == p["kv_cache_tokens"]
        assert answer["memory"]["headroom_bytes"] == p["headroom_bytes"]
    assert [p["frontier"] for p in data["points"]] == [True, False]


def test_cli_refuses_axes_the_recipe_cannot_vary(tmp_path: Path) -> None:
    text = FLAGSHIP.read_text()
    r = deskside("tune", str(FLAGSHIP))
    assert r.returncode == 2 and "--frontier" in r.stderr and "Traceback" not in r.stderr
    r = deskside("tune", "local-tiny", "--frontier", "--gpu-memory-utilization", "0.8")
    assert r.returncode == 2 and "kv_cache_memory" in r.stderr, r.stderr
    assert "speculative" in text

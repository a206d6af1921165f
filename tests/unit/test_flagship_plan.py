"""The flagship's memory decisions (DeepSeek-V4-Flash on two DGX Spark nodes, DSpark overlay
engine, vLLM 0.25.2), from the planner's own accounting of V4's caches, against what that
engine logged on the nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskside.errors import UsageError
from deskside.planner.inputs import Overrides, plan_recipe
from deskside.recipe.load import load_recipe

RECIPE = Path(__file__).parents[2] / "recipes" / "dual-spark-deepseek-v4-flash.yaml"


@pytest.fixture(scope="module")
def recipe():  # type: ignore[no-untyped-def]
    return load_recipe(RECIPE)


def test_one_million_tokens_is_refused_like_the_engine(recipe) -> None:  # type: ignore[no-untyped-def]
    p = plan_recipe(recipe, RECIPE, Overrides(max_model_len=1_048_576))
    assert not p.fits
    # The engine's message on the nodes: "10.91 GiB KV cache is needed, which is larger than
    # the available KV cache memory (9.23 GiB)".
    assert p.refusal is not None
    assert p.refusal.startswith(
        "To serve at least one request with the model's max seq len (1048576), (10.91 GiB KV "
        "cache is needed, which is larger than the available KV cache memory (9.23 GiB)."
    )
    assert p.needed_kv_bytes == 11_712_495_712  # 23 x 47,248 B x 10,778 blocks


def test_204800_fits(recipe) -> None:  # type: ignore[no-untyped-def]
    p = plan_recipe(recipe, RECIPE)
    assert p.fits and p.max_model_len == 204_800
    assert round(p.needed_kv_bytes / 1024**3, 2) == 7.57
    # the engine logged 10.38 GiB available here; deskside's estimate is within 0.15 GiB
    assert abs(p.available_kv_bytes / 1024**3 - 10.38) < 0.15
    assert p.memory is not None and p.memory.headroom_bytes > p.memory.safety_floor_bytes


def test_real_size_is_284b_not_671b(recipe) -> None:  # type: ignore[no-untyped-def]
    p = plan_recipe(recipe, RECIPE)
    assert 280e9 < p.model["total_params"] < 290e9
    assert 12e9 < p.model["active_params"] < 15e9


def test_freeze_risk_refused(recipe) -> None:  # type: ignore[no-untyped-def]
    # 0.835 was killed in the field (20.1 GiB left); deskside refuses it on GB10.
    p = plan_recipe(recipe, RECIPE, Overrides(gpu_memory_utilization=0.835))
    assert not p.fits and p.refusal is not None and "freeze" in p.refusal


def test_vllm_032_refuses_nvfp4_for_v4(recipe) -> None:  # type: ignore[no-untyped-def]
    newer = recipe.model_copy(
        update={"engine": recipe.engine.model_copy(update={"vllm_version": "0.32.0"})}
    )
    with pytest.raises(UsageError, match="nvfp4_ds_mla"):
        plan_recipe(newer, RECIPE)
    fp8 = plan_recipe(newer, RECIPE, Overrides(kv_cache_dtype="fp8_ds_mla"))
    # vLLM 0.32 with async scheduling reserves two batches in flight: 13.20 GiB at 204,800.
    assert round(fp8.needed_kv_bytes / 1024**3, 2) == 13.20


def test_speculative_budget_warning_at_8192(recipe) -> None:  # type: ignore[no-untyped-def]
    # 8,192 batched tokens minus 6 x (5 - 1) DSpark slots = 8,168, as the engine warned
    p = plan_recipe(recipe, RECIPE, Overrides(max_num_batched_tokens=8192))
    assert any("max_num_scheduled_tokens is set to 8168" in w for w in p.warnings)
    p2 = plan_recipe(recipe, RECIPE)
    assert not any("max_num_scheduled_tokens" in w for w in p2.warnings)


def test_breakable_cudagraph_under_enforce_eager_is_reported(recipe) -> None:  # type: ignore[no-untyped-def]
    # the recipe sets VLLM_USE_BREAKABLE_CUDAGRAPH and enforce_eager: true; CUDA graphs are
    # off, so the variable does nothing and the plan asks which one is meant
    p = plan_recipe(recipe, RECIPE)
    (warning,) = [w for w in p.warnings if "VLLM_USE_BREAKABLE_CUDAGRAPH" in w]
    assert "enforce_eager" in warning and "Which does the recipe mean?" in warning
    assert all(warning in r.warnings for r in p.ranks)

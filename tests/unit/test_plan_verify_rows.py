"""The 64 verify-row warning of speculative decoding on sparse-MLA models, on the flagship
(DeepSeek-V4-Flash, DSpark speculation) and on the rule alone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from deskside.hardware import get_profile
from deskside.planner.engine_config import resolve
from deskside.planner.inputs import (
    Overrides,
    arch_from_config,
    plan_recipe,
    recipe_model_config,
    request_from_recipe,
)
from deskside.planner.plan import Plan
from deskside.planner.registry import family_named
from deskside.planner.types import Speculative
from deskside.planner.verify_rows import MAX_VERIFY_ROWS, verify_rows_warning
from deskside.recipe.load import load_recipe

RECIPE = Path(__file__).parents[2] / "recipes" / "dual-spark-deepseek-v4-flash.yaml"


@pytest.fixture(scope="module")
def recipe():  # type: ignore[no-untyped-def]
    return load_recipe(RECIPE)


def plan_with(recipe: Any, seqs: int, tokens: int | None) -> Plan:
    if tokens is None:
        engine = recipe.engine.model_copy(update={"speculative": None})
        return plan_recipe(recipe.model_copy(update={"engine": engine}), RECIPE)
    spec = {"method": "dspark", "num_speculative_tokens": tokens}
    return plan_recipe(recipe, RECIPE, Overrides(max_num_seqs=seqs, speculative=spec))


def rows_warnings(p: Plan) -> list[str]:
    return [w for w in p.warnings if "verify rows" in w]


def test_sixteen_seqs_of_four_rows_is_the_limit(recipe) -> None:  # type: ignore[no-untyped-def]
    assert rows_warnings(plan_with(recipe, 16, 3)) == []  # 16 x (3 + 1) = 64


def test_seventeen_seqs_of_four_rows_warn(recipe) -> None:  # type: ignore[no-untyped-def]
    p = plan_with(recipe, 17, 3)
    assert p.fits  # a warning, not a refusal
    (warning,) = rows_warnings(p)
    assert warning.startswith(
        "max_num_seqs 17 x (num_speculative_tokens 3 + 1) = 68 verify rows per decode step, "
        "over the 64 rows FlashInfer's sparse-MLA decode handles"
    )
    assert warning.endswith(
        "Lower max_num_seqs to 16 or less, or num_speculative_tokens to 2 or less"
    )


def test_no_speculation_no_warning(recipe) -> None:  # type: ignore[no-untyped-def]
    assert rows_warnings(plan_with(recipe, 64, None)) == []


def test_the_flagship_as_shipped_does_not_warn(recipe) -> None:  # type: ignore[no-untyped-def]
    assert rows_warnings(plan_recipe(recipe, RECIPE)) == []  # 6 x (5 + 1) = 36


def test_when_fewer_tokens_cannot_help_only_seqs_are_named(recipe) -> None:  # type: ignore[no-untyped-def]
    (warning,) = rows_warnings(plan_with(recipe, 40, 1))  # 40 x 2 = 80; 64 // 40 - 1 = 0
    assert warning.endswith("Lower max_num_seqs to 32 or less")


def test_dense_mla_cpu_and_small_batches_do_not_warn(recipe) -> None:  # type: ignore[no-untyped-def]
    config, source = recipe_model_config(recipe, RECIPE)
    arch = arch_from_config(config, source)
    req = replace(
        request_from_recipe(recipe, get_profile("h100-80gb"), Overrides()),
        max_num_seqs=17,
        speculative=Speculative("dspark", 3),
    )
    s = resolve(arch, req, family_named(arch.family).engine_defaults(arch))
    assert verify_rows_warning(arch, s) is not None
    dense = replace(arch, layers=tuple(replace(la, index_head_dim=None) for la in arch.layers))
    assert verify_rows_warning(dense, s) is None
    assert verify_rows_warning(arch, replace(s, device="cpu")) is None
    one = replace(s, speculative=Speculative("mtp", MAX_VERIFY_ROWS - 1), max_num_seqs=1)
    assert verify_rows_warning(arch, one) is None

"""Golden files: every shipped recipe's plan and per-node launch (argv + env) are
committed under tests/golden/<recipe>/; this test re-renders and compares them.
`pytest --update-golden` rewrites them after an intended change (review the diff)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deskside.engine.vllm import launch_plan, model_reference
from deskside.planner.inputs import plan_recipe
from deskside.recipe.load import load_recipe

ROOT = Path(__file__).parents[2]
GOLDEN = ROOT / "tests" / "golden"
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))


def normalise(text: str) -> str:
    return text.replace(str(ROOT), "<repo>")


def rendered(recipe_path: Path) -> dict[str, str]:
    recipe = load_recipe(recipe_path)
    model = model_reference(recipe, recipe_path)
    launches = [
        {
            "node": la.node,
            "node_rank": la.node_rank,
            "role": la.role,
            "args": list(la.args),
            "env": la.env_dict,
            "command": la.shell_command(),
        }
        for la in launch_plan(recipe, model)
    ]
    out = {"launch.json": json.dumps(launches, indent=2) + "\n"}
    config = recipe_path.parent / "models" / "tiny-deepseek-v3"
    if recipe.model.path and not (config / "config.json").exists():
        from deskside.tiny import write_tiny_model

        write_tiny_model("deepseek-v3", config)
    plan = plan_recipe(recipe, recipe_path)
    out["plan.json"] = json.dumps(plan.model_dump(mode="json"), indent=2) + "\n"
    return {name: normalise(text) for name, text in out.items()}


@pytest.mark.parametrize("recipe_path", RECIPES, ids=[p.stem for p in RECIPES])
def test_golden(recipe_path: Path, update_golden: bool) -> None:
    folder = GOLDEN / recipe_path.stem
    files = rendered(recipe_path)
    if update_golden:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (folder / name).write_text(text)
    for name, text in files.items():
        expected = (folder / name).read_text()
        assert text == expected, f"{folder / name} differs; rerun with --update-golden if intended"

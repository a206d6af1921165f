"""The recipe a deployed node's exporter reads (`<node>/recipe.yaml` in the bundle) loads
as the same recipe, with the model path still relative to the recipe's folder."""

from __future__ import annotations

from pathlib import Path

from deskside.planner.inputs import plan_recipe
from deskside.recipe.load import load_recipe
from deskside.render.assemble import render

ROOT = Path(__file__).parents[2]
FLAGSHIP = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"


def test_the_node_recipe_loads_as_the_recipe(tmp_path: Path) -> None:
    recipe = load_recipe(FLAGSHIP)
    bundle = render(recipe, FLAGSHIP, plan_recipe(recipe, FLAGSHIP))
    files = dict(bundle.items())
    for node in recipe.cluster.nodes:
        copy = tmp_path / node.name / "recipe.yaml"
        copy.parent.mkdir()
        copy.write_bytes(files[f"{node.name}/recipe.yaml"])
        again = load_recipe(copy)
        assert again.cluster == recipe.cluster and again.engine == recipe.engine
        assert again.guard == recipe.guard and again.monitoring == recipe.monitoring
        assert str(ROOT) not in files[f"{node.name}/recipe.yaml"].decode()

"""The recipe a recorded run was started from."""

from __future__ import annotations

from pathlib import Path

from deskside.errors import DesksideError
from deskside.recipe.types import Recipe
from deskside.runtime.records import RunRecord


def load_run_recipe(run: RunRecord) -> Recipe | None:
    """The recipe a run was started from, when it can still be read (its file, or the
    embedded recipe of that name); None otherwise. A replica group's run gets its group's
    recipe (`deskside.recipe.groups`)."""
    from deskside.home import embedded_recipes, resolve_recipe
    from deskside.recipe.load import load_recipe
    from deskside.recipe.groups import group_recipes

    name = run.replica_set or run.recipe_name
    try:
        if Path(run.recipe).is_file():
            recipe = load_recipe(Path(run.recipe))
        elif name in embedded_recipes():
            recipe = resolve_recipe(name, make_model=False)[0]
        else:
            return None
    except DesksideError:
        return None
    if run.replica_set is None:
        return recipe
    groups = {one.name: one for one in group_recipes(recipe).values()}
    return groups.get(run.recipe_name)


__all__ = ["load_run_recipe"]

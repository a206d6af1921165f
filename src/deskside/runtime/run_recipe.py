"""The recipe a recorded run was started from."""

from __future__ import annotations

from pathlib import Path

from deskside.errors import DesksideError
from deskside.recipe.types import Recipe
from deskside.runtime.records import RunRecord


def load_run_recipe(run: RunRecord) -> Recipe | None:
    """The recipe a run was started from, when it can still be read (its file, or the
    embedded recipe of that name); None otherwise."""
    from deskside.home import embedded_recipes, resolve_recipe
    from deskside.recipe.load import load_recipe

    try:
        if Path(run.recipe).is_file():
            return load_recipe(Path(run.recipe))
        if run.recipe_name in embedded_recipes():
            return resolve_recipe(run.recipe_name, make_model=False)[0]
    except DesksideError:
        return None
    return None


__all__ = ["load_run_recipe"]

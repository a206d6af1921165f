"""The recipe a recorded run or replica set was started from.

A record keeps the path of its recipe file; a recipe embedded in deskside is recorded as
the file `$DESKSIDE_HOME/<name>.yaml`, which does not exist: when the recorded file is not
there, the embedded recipe of the run's name is read again. A recorded file that no longer loads is
`RecipeGone` too, its content never quoted (it may be any file now). A replica group's run gets its
group's recipe (`deskside.recipe.groups`). The recipe found must still be the recorded one
(same name): a file that now holds another recipe, or no file at all, is `RecipeGone`,
saying which file and what to do. A run started with an overlay (`up --overlay`, a tune
point) gets its recorded engine settings laid over the file again.
"""

from __future__ import annotations

from pathlib import Path

from deskside.errors import DesksideError, Location, RecipeError, UsageError
from deskside.home import embedded_recipes, resolve_recipe
from deskside.recipe.groups import group_recipes
from deskside.recipe.overlay import apply_settings
from deskside.recipe.types import Recipe
from deskside.records.replica_set import SetRecord
from deskside.records.run import RunRecord


class RecipeGone(UsageError):
    """The recipe a run was started from cannot be read any more (or is another now)."""


def _gone(message: str, path: Path, name: str) -> RecipeGone:
    return RecipeGone(
        message,
        hint=f"give the recipe file {name} was started from in its place",
        location=Location(str(path)),
    )


def run_recipe(
    found: RunRecord | SetRecord, recipe_file: Path | None = None
) -> tuple[Recipe, Path]:
    """The recipe `found` was started from, and its path (`recipe_file` read instead of
    the recorded file when given). RecipeGone when it cannot be read or is another
    recipe now; the recipe's own errors (RecipeError) when it no longer loads."""
    name = found.recipe_name
    set_name = found.replica_set if isinstance(found, RunRecord) else None
    path = Path(recipe_file or found.recipe)
    started_as = set_name or name  # the name `deskside up` was given
    if path.exists():
        try:
            recipe, _ = resolve_recipe(path, make_model=False)
        except RecipeError:
            if recipe_file is not None:
                raise  # the file the user gave: its problems, located
            # the recorded file no longer loads: say so without quoting what it holds now
            # (it may have been replaced by any file: its text stays out of reports)
            raise _gone(
                f"the recipe file {path} that {name} was started from no longer loads as a "
                "recipe (check it with `deskside validate`)",
                path,
                name,
            ) from None
    elif recipe_file is None and started_as in embedded_recipes():
        recipe, path = resolve_recipe(started_as, make_model=False)
    else:
        raise _gone(f"the recipe file {path} that {name} was started from is gone", path, name)
    if set_name is not None and recipe.name == set_name:
        # a replica group's run: its own recipe within the set's
        one = {g.name: g for g in group_recipes(recipe).values()}.get(name)
        if one is not None:
            return one, path
    if recipe.name != name:
        raise _gone(f"{path} is now recipe {recipe.name!r}, not {name!r}", path, name)
    if isinstance(found, RunRecord) and found.engine_overlay:
        # the run was started with engine settings laid over the file (`up --overlay`)
        recipe = apply_settings(recipe, dict(found.engine_overlay), f"{name}'s recorded overlay")
    return recipe, path


def load_run_recipe(found: RunRecord | SetRecord) -> Recipe | None:
    """`run_recipe` for callers that can do without it (status, watch, top): None when
    it cannot be read."""
    try:
        return run_recipe(found)[0]
    except DesksideError:
        return None


__all__ = ["RecipeGone", "load_run_recipe", "run_recipe"]

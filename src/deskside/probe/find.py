"""Which running cluster `deskside probe RECIPE` means: RECIPE is a recipe file or an
embedded recipe's name (as for `deskside up`), or the name of a run whose recipe file is
elsewhere; the run must be up."""

from __future__ import annotations

from deskside.errors import DesksideError, UsageError
from deskside.home import resolve_recipe
from deskside.probe.keys import engine_headers, proxy_headers
from deskside.probe.target import ProbeTarget, probe_target
from deskside.recipe.types import Recipe
from deskside.recipe.groups import group_names, group_recipes
from deskside.runtime.records import RUN_NAME_RE, RunRecord, load_run
from deskside.runtime.run_recipe import load_run_recipe


def _recipe_and_run(arg: str) -> tuple[Recipe, RunRecord]:
    try:
        recipe, _ = resolve_recipe(arg, make_model=False)
    except UsageError:
        run = load_run(arg) if RUN_NAME_RE.fullmatch(arg) else None
        if run is None:
            raise
        found = load_run_recipe(run)
        if found is None:
            raise UsageError(
                f"the recipe file {run.recipe} that {arg} was started from cannot be read",
                hint="probe it by its recipe file",
            ) from None
        return found, run
    if recipe.replicas is not None:
        groups = ", ".join(group_recipes(recipe)[g].name for g in group_names(recipe))
        raise DesksideError(
            f"{recipe.name} is a replica set: each group is a run of its own",
            hint=f"probe each group: {groups}",
        )
    run = load_run(recipe.name)
    if run is None:
        raise DesksideError(
            f"{recipe.name} is not running here (no run of it)",
            hint=f"start it: deskside up {arg}",
        )
    return recipe, run


def find_target(arg: str, known_hosts: str | None = None) -> ProbeTarget:
    """The run RECIPE names, with its doors' keys."""
    recipe, run = _recipe_and_run(arg)
    return probe_target(recipe, run, engine_headers(run), proxy_headers(recipe, run, known_hosts))

"""Which running cluster `deskside probe RECIPE` means: RECIPE is a recipe file or an
embedded recipe's name (as for `deskside up`), or the name of a run whose recipe file is
elsewhere; the run must be up."""

from __future__ import annotations

from pathlib import Path

from deskside.errors import DesksideError, UsageError
from deskside.home import resolve_recipe
from deskside.probe.keys import engine_headers, proxy_headers
from deskside.probe.target import ProbeTarget, probe_target
from deskside.recipe.load import load_recipe
from deskside.recipe.types import Recipe
from deskside.runtime.records import RUN_NAME_RE, RunRecord, load_run


def _recipe_and_run(arg: str) -> tuple[Recipe, RunRecord]:
    try:
        recipe, _ = resolve_recipe(arg, make_model=False)
    except UsageError:
        run = load_run(arg) if RUN_NAME_RE.fullmatch(arg) else None
        if run is None:
            raise
        return load_recipe(Path(run.recipe)), run
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

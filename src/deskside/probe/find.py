"""Which running cluster `deskside probe RUN` means: a run's name, or the recipe file it
was started from (`deskside.records.names.resolve`); the run must be up. A replica set is
probed group by group."""

from __future__ import annotations

from deskside.errors import DesksideError
from deskside.probe.keys import engine_headers, proxy_headers
from deskside.probe.target import ProbeTarget, probe_target
from deskside.recipe.types import Recipe
from deskside.records.names import recipe_file_named, resolve
from deskside.records.recipes import run_recipe
from deskside.records.replica_set import SetRecord
from deskside.records.run import RunRecord


def _recipe_and_run(arg: str | None) -> tuple[Recipe, RunRecord]:
    found = resolve(arg)
    if isinstance(found, SetRecord):
        raise DesksideError(
            f"{found.recipe_name} is a replica set: each group is a run of its own",
            hint=f"probe each group: {', '.join(found.group_runs())}",
        )
    recipe, _ = run_recipe(found, recipe_file_named(arg) if arg is not None else None)
    return recipe, found


def find_target(arg: str | None, known_hosts: str | None = None) -> ProbeTarget:
    """The run `arg` names (None: the only one up), with its doors' keys."""
    recipe, run = _recipe_and_run(arg)
    return probe_target(recipe, run, engine_headers(run), proxy_headers(recipe, run, known_hosts))

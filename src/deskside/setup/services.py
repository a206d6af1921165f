"""The node daemons `deskside setup` enables as units: deskside's exporter, which is also
the node's memory guard when the recipe sets guard.enforce (an earlyoom that knows the
plan's floor). The unit is the one `deskside render` makes for the node (the same bytes
`up` installs with runtime.systemd, so either may write it), plus a drop-in of setup's own
that starts it only once a release holds the recipe it reads: before the first `up` it is
enabled and waits, instead of failing at every boot."""

from __future__ import annotations

from pathlib import Path

from deskside.engine.services import ServiceSite
from deskside.errors import DesksideError
from deskside.planner.inputs import plan_recipe
from deskside.recipe.types import Recipe
from deskside.render.context import build_context
from deskside.render.units import service_units
from deskside.setup.wanted import UNIT_DIR, WantFile

SERVICE = "exporter"


def drop_in_text(recipe: Recipe, unit: str, needs: str) -> str:
    return (
        f"# Written by `deskside setup {recipe.name}`: {unit} starts once a release of the\n"
        "# recipe is in place (`deskside up` puts it there).\n"
        f"[Unit]\nConditionPathExists={needs}\n"
    )


def exporter_files(
    recipe: Recipe, recipe_path: Path
) -> tuple[dict[str, tuple[list[WantFile], list[str]]], list[str]]:
    """Per node: (the unit and its drop-in, the units to enable); and notes."""
    if not (recipe.runtime.systemd and recipe.monitoring.enabled):
        return {}, [
            "the exporter and memory guard become units with runtime.systemd and "
            "monitoring.enabled; as the recipe is, `up` starts them as processes"
        ]
    try:
        plan = plan_recipe(recipe, recipe_path)
        ctx = build_context(recipe, recipe_path, plan)
    except DesksideError as exc:
        return {}, [f"the exporter's unit is rendered from the plan, which failed: {exc.message}"]
    needs = ServiceSite.deployed(recipe).exporter_recipe
    out: dict[str, tuple[list[WantFile], list[str]]] = {}
    guard = " and memory guard" if recipe.guard.enforce else ""
    for n in ctx.nodes:
        for unit in service_units(ctx, n):
            if unit.service != SERVICE:
                continue
            files = [
                WantFile(
                    f"{UNIT_DIR}/{unit.name}", unit.text, 0o644, f"deskside's exporter{guard}"
                ),
                WantFile(
                    f"{UNIT_DIR}/{unit.name}.d/10-deskside-setup.conf",
                    drop_in_text(recipe, unit.name, needs),
                    0o644,
                    "start it once a release is in place",
                ),
            ]
            out[n.name] = (files, [unit.name])
    notes = (
        []
        if recipe.guard.enforce
        else ["guard.enforce is false: the exporter reports memory, and stops no engine"]
    )
    return out, notes

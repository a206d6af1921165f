"""The safety floor the plan keeps free on a node, which the exporter serves beside the
node's memory (`deskside.facts.memory`) and the guard compares available memory with."""

from __future__ import annotations

from pathlib import Path

from deskside.hardware import PROFILES
from deskside.recipe.types import Node, Recipe


def floor_bytes(recipe: Recipe, recipe_path: Path, node: Node) -> int:
    """The plan's safety floor for `node`: what `deskside plan` reports as
    memory.safety_floor_bytes (the recipe's guard.min_headroom, else the hardware profile's
    floor). A node whose hardware differs from the head's, a plan without a memory section
    (CPU profiles) or a plan that cannot be made (no model config here) gets the same rule
    applied to the node's own hardware profile."""
    from deskside.errors import DesksideError
    from deskside.planner.inputs import plan_recipe

    if node.hardware == recipe.head.hardware:
        try:
            plan = plan_recipe(recipe, recipe_path)
        except DesksideError:
            plan = None
        if plan is not None and plan.memory is not None:
            return plan.memory.safety_floor_bytes
    if recipe.guard.min_headroom is not None:
        return int(recipe.guard.min_headroom)
    return PROFILES[node.hardware].safety_floor_bytes

"""Each replica group's plan: the planner runs on each group's recipe, so a group whose
nodes have another hardware profile gets its own numbers."""

from __future__ import annotations

from pathlib import Path

from deskside.planner.inputs import Overrides, plan_recipe
from deskside.planner.plan import Plan
from deskside.recipe.groups import group_recipes
from deskside.recipe.types import Recipe


def plan_set(recipe: Recipe, recipe_path: Path, o: Overrides | None = None) -> dict[str, Plan]:
    """group name -> the group's plan, in recipe order."""
    return {g: plan_recipe(one, recipe_path, o) for g, one in group_recipes(recipe).items()}


def set_refusal(plans: dict[str, Plan]) -> str | None:
    """Why the set cannot start (the first group whose plan does not fit), else None."""
    for group, plan in plans.items():
        if not plan.fits:
            return f"group {group}: {plan.refusal or 'the plan does not fit'}"
    return None


__all__ = ["plan_set", "set_refusal"]

"""Each replica group as a recipe of its own (pure).

A group's recipe is the set's recipe with the group's nodes only, named
`<set>-<group>`, and marked as a group of the set: its engine requires its own key (the
set's proxy is its door) and it runs no proxy itself. Plan, launch, render, status, watch
and recovery then treat a group exactly like any one-engine recipe.
"""

from __future__ import annotations

from deskside.errors import UsageError
from deskside.recipe.types import Recipe, group_nodes


def group_run_name(set_name: str, group: str) -> str:
    """The name a group runs under (its run record, state folders, unit names)."""
    return f"{set_name}-{group}"


def group_names(recipe: Recipe) -> list[str]:
    """The set's group names in recipe order ([] for a one-engine recipe)."""
    return [g.name for g in recipe.replicas.groups] if recipe.replicas else []


def group_recipes(recipe: Recipe) -> dict[str, Recipe]:
    """group name -> the group's recipe, in recipe order. A recipe without `replicas` is
    not a set: {}."""
    if recipe.replicas is None:
        return {}
    out: dict[str, Recipe] = {}
    for group in recipe.replicas.groups:
        nodes = group_nodes(recipe.cluster.nodes, group)
        one = recipe.model_copy(
            update={
                "name": group_run_name(recipe.name, group.name),
                "description": f"replica group {group.name} of {recipe.name}",
                "cluster": recipe.cluster.model_copy(update={"nodes": nodes}),
                "replicas": None,
            }
        )
        one._replica_set = recipe.name
        out[group.name] = one
    return out


def engine_recipe_of(recipe: Recipe, node: str) -> Recipe:
    """The recipe of the engine `node` belongs to: its group's in a replica set, else the
    recipe itself."""
    for one in group_recipes(recipe).values():
        if any(n.name == node for n in one.cluster.nodes):
            return one
    return recipe


def refuse_replica_set(recipe: Recipe, command: str) -> None:
    """A UsageError for a command that works on one engine, given a replica set."""
    if recipe.replicas is None:
        return
    names = ", ".join(group_run_name(recipe.name, g) for g in group_names(recipe))
    raise UsageError(
        f"{recipe.name} is a replica set; `deskside {command}` works on one engine",
        hint=f"its groups run as {names}: see `deskside status NAME` for each",
    )


def group_recipe(recipe: Recipe, group: str) -> Recipe:
    """One group's recipe (KeyError for a name the set does not have)."""
    return group_recipes(recipe)[group]


__all__ = [
    "engine_recipe_of",
    "group_names",
    "group_recipe",
    "group_recipes",
    "group_run_name",
    "refuse_replica_set",
]

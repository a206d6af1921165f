"""Recipes: the YAML a user writes ("these nodes, this model, this engine profile").

    from deskside.recipe import load_recipe, format_recipe_error
    recipe = load_recipe("recipes/dual-spark-deepseek-v4-flash.yaml")

`load_recipe` raises `deskside.errors.RecipeError` (exit code 2) with every problem located
at its line and column; `format_recipe_error` renders it for people.
"""

from deskside.recipe.load import (
    format_recipe_error,
    load_recipe,
    load_recipe_text,
    resolve_path,
)
from deskside.recipe.schema import recipe_json_schema
from deskside.recipe.types import (
    Cluster,
    Engine,
    Fabric,
    Guard,
    Model,
    Monitoring,
    Node,
    NodeFabric,
    Proxy,
    Recipe,
    Runtime,
    Speculative,
    Ssh,
)

__all__ = [
    "Cluster",
    "Engine",
    "Fabric",
    "Guard",
    "Model",
    "Monitoring",
    "Node",
    "NodeFabric",
    "Proxy",
    "Recipe",
    "Runtime",
    "Speculative",
    "Ssh",
    "format_recipe_error",
    "load_recipe",
    "load_recipe_text",
    "recipe_json_schema",
    "resolve_path",
]

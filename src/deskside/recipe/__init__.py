"""Recipes: the YAML a user writes ("these nodes, this model, this engine profile").

    from deskside.recipe.load import format_recipe_error, load_recipe
    recipe = load_recipe("recipes/dual-spark-deepseek-v4-flash.yaml")

`load_recipe` raises `deskside.errors.RecipeError` (exit code 2) with every problem located
at its line and column; `format_recipe_error` renders it for people.

Modules, innermost first:

- `problems`: `Problem`s found by validators, and located `RecipeError`s built from them;
- `values`: the value types (one field checked on its own: hosts, byte sizes, revisions...);
- `cluster`, `serving`: the section models; `rules`: checks across fields;
- `types`: `Recipe` and every model, imported from here by the rest of deskside;
- `groups`: each group of a replica set as a recipe of its own;
- `schema`: the JSON Schema for editors;
- `wording`: pydantic's errors in plain words; `yaml_tree`: YAML to plain data with
  positions; `locate`: validation with every problem at its key;
- `load`: `load_recipe`, `load_recipe_text`, `resolve_path`, `format_recipe_error`.

This package imports nothing: import from its modules.
"""

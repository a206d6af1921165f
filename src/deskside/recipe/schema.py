"""JSON Schema of the recipe, for editors (yaml-language-server, VS Code) and docs."""

from __future__ import annotations

from typing import Any

from deskside.recipe.types import Recipe

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def recipe_json_schema() -> dict[str, Any]:
    """The recipe's JSON Schema (pydantic's, validation mode) with `$schema` and `title`."""
    schema = Recipe.model_json_schema(mode="validation")
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        **schema,
        "title": "deskside recipe",
    }


__all__ = ["JSON_SCHEMA_DIALECT", "recipe_json_schema"]

"""Recipe overlays: a small YAML file of engine settings laid over a recipe
(`deskside up RECIPE --overlay FILE`), as `deskside tune` writes its winner.

```yaml
recipe: local-tiny          # the recipe it was tuned for (checked)
engine:
  max_model_len: 4096
  max_num_seqs: 6
  max_num_batched_tokens: 4096
  kv_cache_dtype: auto
  speculative:
    num_speculative_tokens: 3
  gpu_memory_utilization: 0.82
```

Only these settings may be overlaid; the merged recipe is validated again with every rule
of a recipe, and a problem is reported at the overlay's line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deskside.errors import RecipeError
from deskside.recipe.problems import single_error
from deskside.recipe.source import read_recipe_bytes
from deskside.recipe.types import Recipe
from deskside.recipe.yaml_tree import RecipeText

TUNABLE = (
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_dtype",
    "gpu_memory_utilization",
)


class SpeculativeOverlay(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_speculative_tokens: int = Field(ge=1)


class EngineOverlay(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_model_len: int | None = Field(None, ge=1)
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    kv_cache_dtype: str | None = None
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    speculative: SpeculativeOverlay | None = None


class Overlay(BaseModel):
    model_config = ConfigDict(extra="forbid")

    recipe: str | None = None
    engine: EngineOverlay


def overlay_text(recipe: str, settings: dict[str, Any], comment: str) -> str:
    """The YAML of an overlay setting `settings` (a tune point's settings; None = kept)."""
    lines = [f"# {line}" if line else "#" for line in comment.splitlines()]
    lines += [f"recipe: {recipe}", "engine:"]
    for key in TUNABLE:
        if settings.get(key) is not None:
            lines.append(f"  {key}: {settings[key]}")
    if settings.get("num_speculative_tokens") is not None:
        lines += [
            "  speculative:",
            f"    num_speculative_tokens: {settings['num_speculative_tokens']}",
        ]
    return "\n".join(lines) + "\n"


def read_overlay(path: Path) -> tuple[Overlay, RecipeText, Any]:
    raw = read_recipe_bytes(path)
    text = raw.decode("utf-8-sig", errors="replace")
    source = RecipeText(text, str(path))
    tree = source.read()
    if tree.problems:
        raise single_error(str(path), *_pos(tree, ()), None, tree.problems[0][1].message, None)
    try:
        return Overlay.model_validate(tree.data), source, tree
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        field = ".".join(str(p) for p in loc)
        hint = "an overlay sets engine." + ", engine.".join(TUNABLE) + " and "
        hint += "engine.speculative.num_speculative_tokens"
        raise single_error(
            str(path), *_pos(tree, loc), field or None, f"{field}: {first['msg']}", hint
        ) from None


def _pos(tree: Any, loc: tuple[Any, ...]) -> tuple[int, int]:
    while loc and loc not in tree.positions:
        loc = loc[:-1]
    line, col = tree.positions.get(loc, (0, 0))
    return line + 1, col + 1


def overlay_values(overlay: Overlay) -> dict[str, Any]:
    return overlay.engine.model_dump(exclude_none=True)


def apply_settings(recipe: Recipe, values: dict[str, Any], where: str = "overlay") -> Recipe:
    """`recipe` with engine `values` laid over it (speculative: only the draft tokens),
    validated again as a whole recipe."""
    data = recipe.model_dump(exclude_unset=True, mode="json")
    engine = data.setdefault("engine", {})
    for key, value in values.items():
        if key == "speculative":
            if not engine.get("speculative"):
                raise RecipeError(
                    f"{where}: sets engine.speculative but the recipe does not draft",
                    hint="drop speculative from the overlay",
                )
            engine["speculative"] = {**engine["speculative"], **value}
        else:
            engine[key] = value
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise RecipeError(
            f"{where}: the recipe with the overlay is not valid: "
            f"{'.'.join(str(p) for p in problem['loc'])}: {problem['msg']}",
            hint="change the overlay's value",
        ) from None


def apply_overlay(recipe: Recipe, path: Path) -> Recipe:
    return read_overlay_for(recipe, path)[0]


def read_overlay_for(recipe: Recipe, path: Path) -> tuple[Recipe, dict[str, Any]]:
    """`recipe` with the overlay file at `path` laid over it, and the overlay's values
    (kept in the run's record, so a restart lays them over the recipe file again)."""
    overlay, _, tree = read_overlay(path)
    if overlay.recipe is not None and overlay.recipe != recipe.name:
        raise single_error(
            str(path),
            *_pos(tree, ("recipe",)),
            "recipe",
            f"the overlay is for recipe {overlay.recipe!r}, not {recipe.name!r}",
            "use it with the recipe it was tuned for",
        )
    values = overlay_values(overlay)
    return apply_settings(recipe, values, str(path)), values

"""Validate a recipe's plain data and point every problem at the key to fix.

pydantic validates the data of a `Tree`; each error it reports (type errors, unknown keys,
missing keys, and the `RecipeProblems` of the rules in `deskside.recipe.rules`) is located
through the tree's positions: at the key of the offending field (`port:` in `engine:`), at
the item for list items, and at the enclosing key when the field is missing. A rule's
problem that names an absent key points at the first of its `fallback_locs` that is
present. Problems the YAML stage already reported are not repeated.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from deskside.recipe.problems import Found, LocPath, RecipeProblems, combine_errors, format_field
from deskside.recipe.types import Recipe
from deskside.recipe.wording import describe_error
from deskside.recipe.yaml_tree import RecipeText, Tree


def validate_tree(source: RecipeText, tree: Tree) -> Recipe:
    """The Recipe of `tree`; RecipeError listing every problem (YAML stage's and pydantic's)."""
    found = [item for _, item, _ in tree.problems]
    structural = [loc for loc, _, covers in tree.problems if covers]
    recipe: Recipe | None = None
    try:
        recipe = Recipe.model_validate(tree.data)
    except ValidationError as exc:
        for error in exc.errors():
            for loc, item in _convert_error(source, tree, error):
                if any(loc[: len(s)] == s for s in structural):
                    continue  # already reported by the YAML stage
                found.append(item)
    if found or recipe is None:
        if not found:  # pragma: no cover - pydantic failed without errors
            found.append(source.found(0, 0, None, "the recipe is not valid", None))
        raise combine_errors(source.path, found)
    return recipe


def _locate(tree: Tree, loc: Sequence[Any]) -> tuple[LocPath, bool]:
    """The part of a pydantic error path that exists in the data, and whether all did."""
    kept: list[str | int] = []
    current: Any = tree.data
    for part in loc:
        if part == "[key]":
            break
        if isinstance(current, dict) and isinstance(part, str):
            kept.append(part)
            if part in current:
                current = current[part]
                continue
            return tuple(kept), False
        if (
            isinstance(current, list)
            and isinstance(part, int)
            and not isinstance(part, bool)
            and 0 <= part < len(current)
        ):
            kept.append(part)
            current = current[part]
            continue
        break
    return tuple(kept), True


def _position(tree: Tree, loc: LocPath, exists: bool) -> tuple[int, int]:
    probe = loc if exists else loc[:-1]
    while probe not in tree.positions and probe:
        probe = probe[:-1]
    return tree.positions.get(probe, tree.positions[()])


def _convert_error(source: RecipeText, tree: Tree, error: Any) -> Iterator[tuple[LocPath, Found]]:
    loc = tuple(error.get("loc", ()))
    ctx = error.get("ctx") or {}
    cause = ctx.get("error")
    if error.get("type") == "value_error" and isinstance(cause, RecipeProblems):
        base, _ = _locate(tree, loc)
        for problem in cause.problems:
            candidates = [(*base, *problem.loc)] + [
                (*base, *extra) for extra in problem.fallback_locs
            ]
            chosen = candidates[0]
            for candidate in candidates:
                kept, exists = _locate(tree, candidate)
                if exists and kept == candidate:
                    chosen = candidate
                    break
            kept, exists = _locate(tree, chosen)
            line, col = _position(tree, kept, exists)
            field_path = format_field((*base, *problem.loc)) or None
            yield kept, source.found(line, col, field_path, problem.message, problem.hint)
        return
    kept, exists = _locate(tree, loc)
    message, hint = describe_error(error, kept, tree.data)
    line, col = _position(tree, kept, exists)
    yield kept, source.found(line, col, format_field(kept) or None, message, hint)


__all__ = ["validate_tree"]

"""Problems with a recipe: found by the models, located in the file, reported together.

Two halves:

- While validating, a rule that finds something wrong makes a `Problem` whose `loc` is the
  path of the field to fix, relative to the model that found it, and raises every problem it
  found at once as one `RecipeProblems` (a ValueError, so pydantic reports it; Python callers
  see an ordinary pydantic ValidationError).
- While loading a file, each problem becomes a `Found` (1-based line and column, field path,
  message, hint), and `combine_errors` turns them into one `RecipeError` listing them all,
  ordered by line.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from deskside.errors import Location, RecipeError

LocPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a recipe.

    `loc` is the path of the field to fix, relative to the model that raised it. When that
    field is absent from the user's file (it took its default), the loader points at the
    first of `fallback_locs` that is present, else at the nearest enclosing key.
    """

    loc: LocPath
    message: str
    hint: str | None = None
    fallback_locs: tuple[LocPath, ...] = ()


class RecipeProblems(ValueError):
    """Raised by validators: carries the located problems for the loader to report."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__(
            "; ".join(
                (".".join(str(part) for part in p.loc) + ": " if p.loc else "") + p.message
                for p in self.problems
            )
        )


def refuse(message: str, hint: str | None = None) -> RecipeProblems:
    """One problem with the value being validated (raise the result)."""
    return RecipeProblems([Problem((), message, hint)])


def raise_problems(problems: Sequence[Problem]) -> None:
    """Raise `problems` together as one RecipeProblems; nothing when there are none."""
    if problems:
        raise RecipeProblems(problems)


def did_you_mean(word: str, choices: Sequence[str]) -> str | None:
    """The closest of `choices` to `word` (difflib), or None when nothing is close."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if not matches:
        lowered = {c.lower(): c for c in choices}
        if word.lower() in lowered:
            return lowered[word.lower()]
        return None
    return matches[0]


# --------------------------------------------------------------------------- located


@dataclass
class Found:
    """A problem found while loading a file, before it is turned into a RecipeError."""

    line: int  # 1-based
    column: int  # 1-based
    field: str | None
    message: str
    hint: str | None


def format_field(loc: LocPath) -> str:
    """A field path as people write it: `cluster.nodes[0].address`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def make_error(path: str, found: Found) -> RecipeError:
    """The RecipeError of one problem: `FILE:LINE:COL: FIELD: message`."""
    subject = f"{found.field}: " if found.field else ""
    return RecipeError(
        f"{path}:{found.line}:{found.column}: {subject}{found.message}",
        hint=found.hint,
        location=Location(path, found.line, found.column, found.field),
    )


def single_error(
    path: str, line: int, column: int, field_path: str | None, message: str, hint: str | None
) -> RecipeError:
    """A RecipeError carrying one problem at a 1-based line and column of `path`."""
    error = make_error(path, Found(line, column, field_path, message, hint))
    return RecipeError(error.message, error.hint, error.location, problems=[error])


def combine_errors(path: str, found: Sequence[Found]) -> RecipeError:
    """One RecipeError listing every problem found (ordered by line, duplicates dropped)."""
    ordered = sorted(found, key=lambda f: (f.line, f.column))
    unique: list[Found] = []
    seen: set[tuple[int, int, str | None, str]] = set()
    for item in ordered:
        key = (item.line, item.column, item.field, item.message)
        if key not in seen:
            seen.add(key)
            unique.append(item)
    errors = [make_error(path, item) for item in unique]
    first = errors[0]
    if len(errors) == 1:
        return RecipeError(first.message, first.hint, first.location, problems=errors)
    return RecipeError(
        f"{path}: {len(errors)} problems in the recipe; the first: {first.message}",
        hint=f"fix them all; each is listed with its line ({first.hint or 'see below'})",
        location=first.location,
        problems=errors,
    )


__all__ = [
    "Found",
    "LocPath",
    "Problem",
    "RecipeProblems",
    "combine_errors",
    "did_you_mean",
    "format_field",
    "make_error",
    "raise_problems",
    "refuse",
    "single_error",
]

"""Load a recipe from YAML, and say exactly where and why one is wrong.

The pipeline: `deskside.recipe.yaml_tree` parses the text with ruamel.yaml and turns it into
plain data with the line and column of every key and list item; `deskside.recipe.locate`
validates the data with pydantic and locates every error it reports (type errors, unknown
keys, missing keys, and the cross-field rules of `deskside.recipe.rules`) at the key (or list
item) to fix, in the words of `deskside.recipe.wording`. Several problems are reported
together: one `RecipeError` whose `problems` lists them all, ordered by line.

Lines and columns are 1-based. Each problem's message reads `FILE:LINE:COL: FIELD.PATH: what
is wrong`, its hint says what to do; `format_recipe_error` prints them.

Relative paths: `model.path` and `model.config` are resolved against the recipe file's
folder when the recipe is loaded, and stored as absolute, normalised strings. Absolute paths
and paths starting with '~' (a home folder, on the node) are kept as written.
`load_recipe_text` resolves against `base_dir`, or the folder of `path` when `path` names a
file; with the default `path="<recipe>"` relative paths are kept as written.

No exception other than `RecipeError` leaves `load_recipe` or `load_recipe_text`.
"""

from __future__ import annotations

import os
from pathlib import Path

from deskside.errors import Location, RecipeError
from deskside.recipe.locate import validate_tree
from deskside.recipe.problems import single_error
from deskside.recipe.source import read_recipe_bytes
from deskside.recipe.types import Recipe
from deskside.recipe.yaml_tree import RecipeText


def resolve_path(recipe_path: str | Path, value: str) -> str:
    """`value` resolved against the folder of the recipe file `recipe_path`.

    Absolute paths and '~' paths are returned unchanged; relative ones become absolute and
    normalised (`os.path.abspath`, symlinks are not resolved).
    """
    return _resolve_against(Path(recipe_path).parent, value)


def load_recipe(path: str | Path) -> Recipe:
    """Read, parse and validate the recipe file at `path`: a regular file, not a link, of
    at most `deskside.recipe.source.MAX_RECIPE_BYTES`.

    Raises RecipeError (exit code 2) for anything wrong, located in the file.
    """
    shown = str(path)
    raw = read_recipe_bytes(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        start = exc.start + (3 if raw.startswith(b"\xef\xbb\xbf") else 0)
        before = raw[:start]
        line = before.count(b"\n") + 1
        column = len(before) - (before.rfind(b"\n") + 1) + 1
        raise single_error(
            shown,
            line,
            column,
            None,
            f"the file is not UTF-8 text (byte 0x{raw[start]:02x} at offset {start})",
            "save the recipe as UTF-8 plain text",
        ) from None
    return load_recipe_text(text, shown, base_dir=Path(path).parent)


def load_recipe_text(
    text: str, path: str = "<recipe>", *, base_dir: str | Path | None = None
) -> Recipe:
    """Parse and validate recipe YAML `text`; `path` is the name errors show.

    Relative model.path/model.config are resolved against `base_dir`, else against the
    folder of `path` when it names a file (not "<...>"), else kept as written.
    Raises RecipeError (exit code 2) for anything wrong, located in `text`.
    """
    path = str(path)
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8-sig")
        except UnicodeDecodeError:
            raise single_error(
                path, 1, 1, None, "the recipe is not UTF-8 text", "save it as UTF-8"
            ) from None
    if not isinstance(text, str):
        raise single_error(
            path, 1, 1, None, f"the recipe must be text, not {type(text).__name__}", None
        )
    if base_dir is None and not (path.startswith("<") and path.endswith(">")):
        base_dir = Path(path).parent
    try:
        source = RecipeText(text, path)
        recipe = validate_tree(source, source.read())
        if base_dir is not None:
            recipe = _resolve_model_paths(recipe, base_dir)
        return recipe
    except RecipeError:
        raise
    except RecursionError:
        raise single_error(
            path, 1, 1, None, "the recipe is nested too deeply", "a recipe is a few levels deep"
        ) from None
    except Exception as exc:  # a bug of ours must still not reach the user as a traceback
        raise single_error(
            path,
            1,
            1,
            None,
            f"cannot load the recipe ({type(exc).__name__}: {exc})",
            "this is probably a deskside bug; please report it with the recipe",
        ) from None


def format_recipe_error(err: RecipeError) -> str:
    """The user-facing text of a recipe error: every problem with its place and hint.

    ```
    recipes/x.yaml:12:5: engine.max_model_lenn: unknown key
      hint: did you mean 'max_model_len'?
    ```
    """
    problems = err.problems or [err]
    lines: list[str] = []
    if len(problems) > 1:
        where = err.location.path if err.location else "recipe"
        lines.append(f"{where}: {len(problems)} problems")
    for problem in problems:
        message = problem.message
        prefix = _location_prefix(problem.location)
        if prefix and not message.startswith(prefix):
            message = f"{prefix}: {message}"
        lines.append(message)
        if problem.hint:
            hint_lines = problem.hint.splitlines() or [""]
            lines.append(f"  hint: {hint_lines[0]}")
            lines.extend(f"        {extra}" for extra in hint_lines[1:])
    return "\n".join(lines)


# --------------------------------------------------------------------------- internals


def _location_prefix(location: Location | None) -> str:
    if location is None:
        return ""
    prefix = location.path
    if location.line is not None:
        prefix += f":{location.line}"
        if location.column is not None:
            prefix += f":{location.column}"
    return prefix


def _resolve_against(base: str | Path, value: str) -> str:
    if os.path.isabs(value) or value.startswith("~"):
        return value
    return os.path.normpath(os.path.abspath(os.path.join(os.fspath(base), value)))


def _resolve_model_paths(recipe: Recipe, base_dir: str | Path) -> Recipe:
    model = recipe.model
    update: dict[str, str] = {}
    if model.path is not None:
        update["path"] = _resolve_against(base_dir, model.path)
    if model.config is not None:
        update["config"] = _resolve_against(base_dir, model.config)
    if not update:
        return recipe
    return recipe.model_copy(update={"model": model.model_copy(update=update)})


__all__ = [
    "format_recipe_error",
    "load_recipe",
    "load_recipe_text",
    "resolve_path",
]

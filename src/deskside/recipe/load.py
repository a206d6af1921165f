"""Load a recipe from YAML, and say exactly where and why one is wrong.

Parsing uses ruamel.yaml's round-trip loader, which remembers the line and column of every
key and list item. The YAML tree is turned into plain data (dicts, lists, str, int, float,
bool, None) while a table of positions is kept for every path; pydantic then validates the
plain data, and every error it reports — type errors, unknown keys, missing keys, and the
cross-field rules in `deskside.recipe.types` — becomes a `RecipeError` located at the key
(or list item) to fix. Several problems are reported together: one `RecipeError` whose
`problems` lists them all, ordered by line.

Positions point at the key of the offending field (`port:` in `engine:`), at the item for
list items, and at the enclosing key when the field is missing. Lines and columns are
1-based. Each problem's message reads `FILE:LINE:COL: FIELD.PATH: what is wrong`, its hint
says what to do; `format_recipe_error` prints them.

Relative paths: `model.path` and `model.config` are resolved against the recipe file's
folder when the recipe is loaded, and stored as absolute, normalised strings. Absolute paths
and paths starting with '~' (a home folder, on the node) are kept as written.
`load_recipe_text` resolves against `base_dir`, or the folder of `path` when `path` names a
file; with the default `path="<recipe>"` relative paths are kept as written.

No exception other than `RecipeError` leaves `load_recipe` or `load_recipe_text`.
"""

from __future__ import annotations

import datetime
import os
import re
import types
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, CommentedSet, TaggedScalar
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError

from deskside.errors import Location, RecipeError
from deskside.recipe.problems import RecipeProblems, did_you_mean
from deskside.recipe.types import Recipe

MAX_RECIPE_BYTES = 1024 * 1024  # a recipe is a page of text; refuse anything absurd
MAX_VALUES = 20_000  # values after expanding YAML aliases ("billion laughs" guard)
MAX_DEPTH = 32  # nesting depth of the recipe data

_STANDARD_TAG = "tag:yaml.org,2002:"

Loc = tuple[str | int, ...]


# --------------------------------------------------------------------------- public API


def resolve_path(recipe_path: str | Path, value: str) -> str:
    """`value` resolved against the folder of the recipe file `recipe_path`.

    Absolute paths and '~' paths are returned unchanged; relative ones become absolute and
    normalised (`os.path.abspath`, symlinks are not resolved).
    """
    return _resolve_against(Path(recipe_path).parent, value)


def load_recipe(path: str | Path) -> Recipe:
    """Read, parse and validate the recipe file at `path`.

    Raises RecipeError (exit code 2) for anything wrong, located in the file.
    """
    shown = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise RecipeError(
            f"{shown}: cannot read the recipe: {reason}",
            hint="check the path; recipes live in recipes/*.yaml",
            location=Location(shown),
        ) from None
    except Exception as exc:  # e.g. a path with a NUL byte
        raise RecipeError(
            f"{shown}: cannot read the recipe: {exc}",
            hint="check the path",
            location=Location(shown),
        ) from None
    if len(raw) > MAX_RECIPE_BYTES:
        raise _single(shown, 1, 1, None, _too_big_message(len(raw)), _TOO_BIG_HINT)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        start = exc.start + (3 if raw.startswith(b"\xef\xbb\xbf") else 0)
        before = raw[:start]
        line = before.count(b"\n") + 1
        column = len(before) - (before.rfind(b"\n") + 1) + 1
        raise _single(
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
            raise _single(
                path, 1, 1, None, "the recipe is not UTF-8 text", "save it as UTF-8"
            ) from None
    if not isinstance(text, str):
        raise _single(path, 1, 1, None, f"the recipe must be text, not {type(text).__name__}", None)
    if base_dir is None and not (path.startswith("<") and path.endswith(">")):
        base_dir = Path(path).parent
    try:
        return _Loader(text, path).load(base_dir)
    except RecipeError:
        raise
    except RecursionError:
        raise _single(
            path, 1, 1, None, "the recipe is nested too deeply", "a recipe is a few levels deep"
        ) from None
    except Exception as exc:  # a bug of ours must still not reach the user as a traceback
        raise _single(
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


@dataclass
class _Found:
    """A problem found while loading, before it is turned into a RecipeError."""

    line: int  # 1-based
    column: int  # 1-based
    field: str | None
    message: str
    hint: str | None


@dataclass
class _Tree:
    """Plain data converted from the YAML tree, with the position of every path."""

    data: Any = None
    positions: dict[Loc, tuple[int, int]] = field(default_factory=dict)  # 0-based
    # (path, problem, whether pydantic errors at or below the path repeat it)
    problems: list[tuple[Loc, _Found, bool]] = field(default_factory=list)
    values: int = 0


class _TooMany(Exception):
    pass


_TOO_BIG_HINT = "a recipe is a page of YAML; check that this is the right file"


def _too_big_message(size: int) -> str:
    return f"the recipe is too large ({size} bytes; at most {MAX_RECIPE_BYTES})"


def _location_prefix(location: Location | None) -> str:
    if location is None:
        return ""
    prefix = location.path
    if location.line is not None:
        prefix += f":{location.line}"
        if location.column is not None:
            prefix += f":{location.column}"
    return prefix


def _make_error(path: str, found: _Found) -> RecipeError:
    subject = f"{found.field}: " if found.field else ""
    return RecipeError(
        f"{path}:{found.line}:{found.column}: {subject}{found.message}",
        hint=found.hint,
        location=Location(path, found.line, found.column, found.field),
    )


def _single(
    path: str, line: int, column: int, field_path: str | None, message: str, hint: str | None
) -> RecipeError:
    error = _make_error(path, _Found(line, column, field_path, message, hint))
    return RecipeError(error.message, error.hint, error.location, problems=[error])


def _combine(path: str, found: Sequence[_Found]) -> RecipeError:
    ordered = sorted(found, key=lambda f: (f.line, f.column))
    unique: list[_Found] = []
    seen: set[tuple[int, int, str | None, str]] = set()
    for item in ordered:
        key = (item.line, item.column, item.field, item.message)
        if key not in seen:
            seen.add(key)
            unique.append(item)
    errors = [_make_error(path, item) for item in unique]
    first = errors[0]
    if len(errors) == 1:
        return RecipeError(first.message, first.hint, first.location, problems=errors)
    return RecipeError(
        f"{path}: {len(errors)} problems in the recipe; the first: {first.message}",
        hint=f"fix them all; each is listed with its line ({first.hint or 'see below'})",
        location=first.location,
        problems=errors,
    )


def _resolve_against(base: str | Path, value: str) -> str:
    if os.path.isabs(value) or value.startswith("~"):
        return value
    return os.path.normpath(os.path.abspath(os.path.join(os.fspath(base), value)))


def _format_field(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def _describe_value(value: object) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"the number {_short_number(value)}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"the text {shown!r}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, datetime.date):
        return f"a date ({value.isoformat()})"
    return f"a {type(value).__name__}"


def _yaml_text(value: object) -> str:
    """How a scalar would read in YAML, for 'quote it' hints."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.date):
        return value.isoformat()
    if value is None:
        return ""
    return str(value)


# ----- the model tree: which model and field a path leads to


def _unwrap(annotation: Any) -> list[Any]:
    """The concrete types an annotation may hold (Annotated and unions flattened)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _unwrap(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        out: list[Any] = []
        for arg in get_args(annotation):
            out.extend(_unwrap(arg))
        return out
    return [annotation]


def _descend(annotation: Any, part: str | int) -> Any:
    for candidate in _unwrap(annotation):
        if (
            isinstance(candidate, type)
            and issubclass(candidate, BaseModel)
            and isinstance(part, str)
            and part in candidate.model_fields
        ):
            return candidate.model_fields[part].annotation
        origin = get_origin(candidate)
        args = get_args(candidate)
        if origin is list and isinstance(part, int) and args:
            return args[0]
        if origin is dict and len(args) == 2:
            return args[1]
    return None


def _model_at(loc: Loc) -> type[BaseModel] | None:
    annotation: Any = Recipe
    for part in loc:
        annotation = _descend(annotation, part)
        if annotation is None:
            return None
    for candidate in _unwrap(annotation):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _field_at(loc: Loc) -> FieldInfo | None:
    if not loc or not isinstance(loc[-1], str):
        return None
    model = _model_at(loc[:-1])
    if model is None:
        return None
    return model.model_fields.get(loc[-1])


def _sections() -> dict[str, list[str]]:
    """Field name -> the section paths where it is a valid key (for 'belongs under')."""
    found: dict[str, list[str]] = {}

    def walk(model: type[BaseModel], where: str, depth: int) -> None:
        for name, info in model.model_fields.items():
            found.setdefault(name, []).append(where or "the top level")
            if depth > 4:
                continue
            for candidate in _unwrap(info.annotation):
                inner = candidate
                if get_origin(candidate) is list and get_args(candidate):
                    inner = _unwrap(get_args(candidate)[0])[0]
                    suffix = "[]"
                else:
                    suffix = ""
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    section = f"{where}.{name}{suffix}" if where else f"{name}{suffix}"
                    walk(inner, section, depth + 1)

    walk(Recipe, "", 0)
    return found


_SECTIONS = _sections()


def _hint_for_field(loc: Loc) -> str | None:
    info = _field_at(loc)
    if info is None or not info.description:
        return None
    name = loc[-1]
    return f"{name}: {info.description}"


# ----- the loader


class _Loader:
    def __init__(self, text: str, path: str) -> None:
        self.text = text
        self.path = path
        self.line_count = max(1, text.count("\n") + 1)

    # -- positions

    def _clamp(self, line: int, column: int) -> tuple[int, int]:
        """1-based (line, column) from 0-based, kept inside the document."""
        line1 = min(max(line + 1, 1), self.line_count)
        return line1, max(column + 1, 1)

    def _first_content_line(self) -> int:
        for number, line in enumerate(self.text.splitlines(), start=1):
            stripped = line.strip()
            if stripped and not stripped.startswith(("#", "%")) and stripped != "---":
                return number
        return 1

    def _found(
        self, line0: int, col0: int, field_path: str | None, message: str, hint: str | None
    ) -> _Found:
        line, column = self._clamp(line0, col0)
        return _Found(line, column, field_path, message, hint)

    def _error(self, line0: int, col0: int, message: str, hint: str | None) -> RecipeError:
        return _combine(self.path, [self._found(line0, col0, None, message, hint)])

    # -- stage 1: YAML

    def load(self, base_dir: str | Path | None) -> Recipe:
        if not isinstance(self.text, str):
            raise self._error(0, 0, "the recipe must be text", "pass the file's text")
        if len(self.text) > MAX_RECIPE_BYTES:
            raise self._error(0, 0, _too_big_message(len(self.text)), _TOO_BIG_HINT)
        document = self._parse()
        if document is None:
            raise self._error(
                self._first_content_line() - 1,
                0,
                "the recipe is empty",
                "a recipe is a YAML mapping with at least name, cluster, model and engine; "
                "see recipes/local-tiny.yaml",
            )
        if not isinstance(document, CommentedMap):
            line, col = self._start_of(document)
            raise self._error(
                line,
                col,
                f"the recipe must be a mapping of keys (name:, cluster:, ...), found "
                f"{_describe_value(self._plain_preview(document))}",
                "start the file with top-level keys such as 'name: my-recipe'",
            )
        tree = self._convert(document)
        return self._validate(tree, base_dir)

    def _start_of(self, node: object) -> tuple[int, int]:
        lc = getattr(node, "lc", None)
        if lc is not None and getattr(lc, "line", None) is not None:
            return int(lc.line), int(lc.col or 0)
        return self._first_content_line() - 1, 0

    @staticmethod
    def _plain_preview(value: object) -> object:
        if isinstance(value, CommentedSeq):
            return []
        if isinstance(value, TaggedScalar):
            return str(value.value)
        return value

    def _yaml(self) -> YAML:
        yaml = YAML(typ="rt", pure=True)
        yaml.allow_duplicate_keys = False
        return yaml

    def _parse(self) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return self._yaml().load(self.text)
            except DuplicateKeyError as exc:
                raise self._duplicate_key(exc) from None
            except MarkedYAMLError as exc:
                raise self._syntax_error(exc) from None
            except ReaderError as exc:
                raise self._reader_error(exc) from None
            except YAMLError as exc:
                raise self._error(0, 0, f"YAML error: {exc}", _SYNTAX_HINT) from None
            except RecursionError:
                raise self._error(
                    0, 0, "the YAML is nested too deeply", "a recipe is a few levels deep"
                ) from None
            except Exception as exc:  # scalar conversions: 5000-digit ints, !!float x, ...
                raise self._construction_error(exc) from None

    def _duplicate_key(self, exc: DuplicateKeyError) -> RecipeError:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line, mark.column) if mark is not None else (0, 0)
        match = re.search(r'found duplicate key "(.*?)" with value', str(exc.problem or ""))
        key = match.group(1) if match else None
        first = self._first_occurrence(exc, key, line) if key is not None else None
        message = f"duplicate key '{key}'" if key is not None else "duplicate key"
        if first:
            message += f" (first at line {first})"
        return self._error(
            line, col, message, "a key may appear once per mapping; keep one of them"
        )

    def _first_occurrence(self, exc: DuplicateKeyError, key: str, dup_line: int) -> int | None:
        """The 1-based line where the mapping holding a duplicate key first has that key."""
        context = exc.context_mark
        if context is None:
            return None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                root = self._yaml().compose(self.text)
        except Exception:
            return None
        for node in _walk_nodes(root):
            if (
                isinstance(node, MappingNode)
                and node.start_mark.line == context.line
                and node.start_mark.column == context.column
            ):
                for key_node, _ in node.value:
                    if (
                        isinstance(key_node, ScalarNode)
                        and key_node.value == key
                        and key_node.start_mark.line < dup_line
                    ):
                        return int(key_node.start_mark.line) + 1
        return None

    def _syntax_error(self, exc: MarkedYAMLError) -> RecipeError:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line, mark.column) if mark is not None else (0, 0)
        problem = str(exc.problem or "")
        context = str(exc.context or "")
        if "expected a single document" in context:
            return self._error(
                line,
                col,
                "a recipe is a single YAML document, but another one starts here",
                "remove the '---' line and everything after it, or put each recipe in its own file",
            )
        if "\\t" in problem or "\t" in problem:
            return self._error(
                line,
                col,
                "YAML does not allow a tab character here (tabs cannot indent)",
                "indent with spaces only",
            )
        if "undefined alias" in problem:
            return self._error(
                line, col, problem, "define the anchor (&name) before using the alias (*name)"
            )
        text = problem or context or "invalid YAML"
        if context and problem and context not in problem:
            started = exc.context_mark
            if started is not None and started.line != line:
                context = f"{context} started at line {min(started.line + 1, self.line_count)}"
            text = f"{problem} ({context})"
        return self._error(line, col, f"YAML syntax error: {text}", _SYNTAX_HINT)

    def _reader_error(self, exc: ReaderError) -> RecipeError:
        position = getattr(exc, "position", 0)
        if not isinstance(position, int) or position < 0:
            position = 0
        before = self.text[:position]
        line = before.count("\n")
        col = len(before) - (before.rfind("\n") + 1)
        character = getattr(exc, "character", None)
        code = f" (U+{ord(character):04X})" if isinstance(character, str) and character else ""
        if isinstance(character, int):
            code = f" (U+{character:04X})"
        return self._error(
            line,
            col,
            f"the recipe contains a character YAML does not allow{code}",
            "remove it: recipes are plain UTF-8 text without control characters",
        )

    def _construction_error(self, exc: Exception) -> RecipeError:
        """Locate a scalar ruamel could not convert (it raises without a position)."""
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        line, col = 0, 0
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yaml = self._yaml()
                root = yaml.compose(self.text)
                for node in _walk_nodes(root):
                    if not isinstance(node, ScalarNode):
                        continue
                    try:
                        yaml.constructor.construct_object(node, deep=True)
                    except Exception:
                        line, col = node.start_mark.line, node.start_mark.column
                        break
        except Exception:
            pass
        if "digits" in reason:
            reason = "a number with far too many digits"
        return self._error(
            line,
            col,
            f"cannot read this value: {reason}",
            "check the value; quote it if it is text",
        )

    # -- stage 2: YAML tree -> plain data + positions

    def _convert(self, document: CommentedMap) -> _Tree:
        tree = _Tree()
        tree.positions[()] = self._start_of(document)
        try:
            tree.data = self._plain(document, (), tree, 0, ())
        except _TooMany:
            line, col = tree.positions[()]
            raise self._error(
                line,
                col,
                f"the recipe expands to more than {MAX_VALUES} values (YAML aliases?)",
                "a recipe is a page of YAML; avoid aliases that refer to large structures",
            ) from None
        return tree

    def _problem(self, tree: _Tree, loc: Loc, message: str, hint: str | None) -> None:
        line, col = tree.positions.get(loc, tree.positions[()])
        tree.problems.append(
            (loc, self._found(line, col, _format_field(loc) or None, message, hint), True)
        )

    def _plain(self, node: Any, loc: Loc, tree: _Tree, depth: int, stack: tuple[int, ...]) -> Any:
        tree.values += 1
        if tree.values > MAX_VALUES:
            raise _TooMany
        if isinstance(node, CommentedMap | CommentedSeq | CommentedSet):
            if id(node) in stack:
                self._problem(tree, loc, "this value refers to itself (recursive alias)", None)
                return None
            if depth >= MAX_DEPTH:
                self._problem(tree, loc, "nested too deeply", "a recipe is a few levels deep")
                return None
            tag = _tag_of(node)
            if tag is not None:
                self._problem(
                    tree,
                    loc,
                    f"YAML tag {tag} is not supported in recipes",
                    "remove the tag",
                )
                return None
        if isinstance(node, CommentedSet):
            self._problem(tree, loc, "YAML sets (!!set) are not supported", "use a list")
            return None
        if isinstance(node, CommentedMap):
            return self._plain_map(node, loc, tree, depth, (*stack, id(node)))
        if isinstance(node, CommentedSeq):
            items: list[Any] = []
            for index, item in enumerate(node):
                position = _lc_get(node, index)
                tree.positions[(*loc, index)] = position or tree.positions.get(loc, (0, 0))
                items.append(self._plain(item, (*loc, index), tree, depth + 1, (*stack, id(node))))
            return items
        if isinstance(node, TaggedScalar):
            tag = node.tag.value if node.tag is not None else None
            self._problem(
                tree,
                loc,
                f"YAML tag {tag or ''} is not supported in recipes".replace("  ", " "),
                "remove the tag",
            )
            return None
        if isinstance(node, bool):
            return bool(node)
        if isinstance(node, int):
            if type(node).__name__ == "ScalarBoolean":
                return bool(node)
            return int(node)
        if isinstance(node, float):
            return float(node)
        if isinstance(node, str):
            return str(node)
        if node is None or isinstance(node, datetime.date):
            return node
        if isinstance(node, bytes):
            self._problem(tree, loc, "binary values (!!binary) are not supported", "write text")
            return None
        if isinstance(node, dict | list):
            kind = "mapping" if isinstance(node, dict) else "list"
            self._problem(tree, loc, f"unsupported YAML {kind} ({type(node).__name__})", None)
            return None
        self._problem(tree, loc, f"unsupported YAML value ({type(node).__name__})", None)
        return None

    def _plain_map(
        self, node: CommentedMap, loc: Loc, tree: _Tree, depth: int, stack: tuple[int, ...]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        fallback = tree.positions.get(loc, self._start_of(node))
        for key in list(node.keys()):
            position = _lc_get(node, key) or fallback
            if not isinstance(key, str) or isinstance(key, TaggedScalar):
                line, col = position
                shown = _describe_value(key) if isinstance(key, int | float | bool) else None
                if shown is None:
                    if key is None:
                        shown = "null"
                    elif isinstance(key, tuple | list):
                        shown = "a list"
                    elif isinstance(key, dict) or type(key).__name__ == "CommentedKeyMap":
                        shown = "a mapping"
                    else:
                        shown = f"a {type(key).__name__}"
                tree.problems.append(
                    (
                        loc,
                        self._found(
                            line,
                            col,
                            _format_field(loc) or None,
                            f"keys must be text; found {shown} as a key",
                            "write a key name made of letters; quote it if it looks like a "
                            "number, true/false or null",
                        ),
                        False,
                    )
                )
                continue
            key = str(key)
            tree.positions[(*loc, key)] = position
            out[key] = self._plain(node[key], (*loc, key), tree, depth + 1, stack)
        return out

    # -- stage 3: validation

    def _validate(self, tree: _Tree, base_dir: str | Path | None) -> Recipe:
        found = [item for _, item, _ in tree.problems]
        structural = [loc for loc, _, covers in tree.problems if covers]
        recipe: Recipe | None = None
        try:
            recipe = Recipe.model_validate(tree.data)
        except ValidationError as exc:
            for error in exc.errors():
                for loc, item in self._convert_error(tree, error):
                    if any(loc[: len(s)] == s for s in structural):
                        continue  # already reported by the YAML stage
                    found.append(item)
        if found or recipe is None:
            if not found:  # pragma: no cover - pydantic failed without errors
                found.append(self._found(0, 0, None, "the recipe is not valid", None))
            raise _combine(self.path, found)
        if base_dir is not None:
            recipe = _resolve_model_paths(recipe, base_dir)
        return recipe

    def _locate(self, tree: _Tree, loc: Sequence[Any]) -> tuple[Loc, bool]:
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

    def _position(self, tree: _Tree, loc: Loc, exists: bool) -> tuple[int, int]:
        probe = loc if exists else loc[:-1]
        while probe not in tree.positions and probe:
            probe = probe[:-1]
        return tree.positions.get(probe, tree.positions[()])

    def _convert_error(self, tree: _Tree, error: Any) -> Iterator[tuple[Loc, _Found]]:
        loc = tuple(error.get("loc", ()))
        ctx = error.get("ctx") or {}
        cause = ctx.get("error")
        if error.get("type") == "value_error" and isinstance(cause, RecipeProblems):
            base, _ = self._locate(tree, loc)
            for problem in cause.problems:
                candidates = [(*base, *problem.loc)] + [
                    (*base, *extra) for extra in problem.fallback_locs
                ]
                chosen = candidates[0]
                for candidate in candidates:
                    kept, exists = self._locate(tree, candidate)
                    if exists and kept == candidate:
                        chosen = candidate
                        break
                kept, exists = self._locate(tree, chosen)
                line, col = self._position(tree, kept, exists)
                field_path = _format_field((*base, *problem.loc)) or None
                yield kept, self._found(line, col, field_path, problem.message, problem.hint)
            return
        kept, exists = self._locate(tree, loc)
        message, hint = _describe_error(error, kept, tree.data)
        line, col = self._position(tree, kept, exists)
        yield kept, self._found(line, col, _format_field(kept) or None, message, hint)


_SYNTAX_HINT = (
    "check the indentation (spaces, aligned under the parent key) and the quoting on this "
    "line and the one before"
)


def _lc_get(node: CommentedMap | CommentedSeq, key: Any) -> tuple[int, int] | None:
    """The 0-based position of a key (mapping) or item (sequence), if ruamel recorded it."""
    try:
        data = node.lc.data
        entry = data.get(key) if isinstance(data, dict) else None
    except Exception:
        return None
    if not entry or len(entry) < 2:
        return None
    return int(entry[0]), int(entry[1])


def _tag_of(node: Any) -> str | None:
    """A non-standard tag on a mapping or sequence, if any."""
    tag = getattr(node, "tag", None)
    value = getattr(tag, "value", None) if tag is not None else None
    if not value or not isinstance(value, str) or value.startswith(_STANDARD_TAG):
        return None
    if value in ("!!map", "!!seq", "!!omap", "!!set", "!!pairs"):
        return None
    return value


def _walk_nodes(root: Node | None) -> Iterator[Node]:
    if root is None:
        return
    stack: list[Node] = [root]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        if isinstance(node, MappingNode):
            for key_node, value_node in reversed(node.value):
                stack.append(value_node)
                stack.append(key_node)
        elif isinstance(node, SequenceNode):
            stack.extend(reversed(node.value))


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


# ----- pydantic errors in plain words


def _literal_choices(loc: Loc, ctx: dict[str, Any]) -> list[object]:
    """The values a Literal field allows: from the model, else from pydantic's message."""
    info = _field_at(loc)
    if info is not None:
        for candidate in _unwrap(info.annotation):
            if get_origin(candidate) is Literal:
                return list(get_args(candidate))
    expected = str(ctx.get("expected", ""))
    return [m.group(1) for m in re.finditer(r"'((?:[^'\\]|\\.)*)'", expected)]


def _show_choice(choice: object) -> str:
    return f"'{choice}'" if isinstance(choice, str) else str(choice)


def _value_at(data: Any, loc: Loc) -> Any:
    current = data
    for part in loc:
        in_dict = isinstance(current, dict) and part in current
        in_list = isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current)
        if not (in_dict or in_list):
            return None
        current = current[part]
    return current


def _describe_error(error: Any, loc: Loc, data: Any) -> tuple[str, str | None]:
    kind = str(error.get("type", ""))
    ctx: dict[str, Any] = error.get("ctx") or {}
    value = error.get("input")
    if kind not in ("missing",):
        # pydantic's `input` may be a sub-value for union members; prefer the user's value
        from_data = _value_at(data, loc)
        if from_data is not None or value is None:
            value = from_data
    shown = _describe_value(value)
    field_hint = _hint_for_field(loc)
    name = loc[-1] if loc else None
    hint: str | None

    if kind == "missing":
        parent = _format_field(loc[:-1]) or "the top level"
        where = f"under '{parent}'" if loc[:-1] else "at the top level"
        hint = f"add '{name}:' {where}"
        if field_hint:
            hint += f" ({field_hint})"
        return "required key is missing", hint

    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        valid = list(model.model_fields) if model is not None else []
        guess = did_you_mean(str(name), valid) if valid else None
        if guess:
            return "unknown key", f"did you mean '{guess}'?"
        elsewhere = [
            place for place in _SECTIONS.get(str(name), []) if place != _section_name(loc[:-1])
        ]
        if elsewhere:
            return "unknown key", f"'{name}' belongs under {' or '.join(elsewhere)}"
        return "unknown key", f"valid keys here: {', '.join(valid)}" if valid else None

    if kind == "int_parsing_size":
        return "the number has far too many digits", field_hint

    if kind in ("int_type", "int_parsing", "int_from_float"):
        hint = field_hint
        if isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]+\s*", value):
            hint = "remove the quotes: numbers are written bare"
        elif isinstance(value, float):
            hint = "write a whole number (no decimal point)"
        return f"expected a whole number, got {shown}", hint

    if kind in ("float_type", "float_parsing"):
        hint = field_hint
        if isinstance(value, str):
            hint = "remove the quotes: numbers are written bare"
        return f"expected a number, got {shown}", hint

    if kind == "finite_number":
        return f"expected a finite number, got {shown}", field_hint

    if kind in ("bool_type", "bool_parsing"):
        return f"expected true or false, got {shown}", "write true or false, without quotes"

    if kind == "string_type":
        if isinstance(value, bool | int | float | datetime.date) or value is None:
            return (
                f"expected text, got {shown}",
                f'quote it: "{_yaml_text(value)}" (YAML reads it as a number, boolean, date '
                "or null otherwise)",
            )
        return f"expected text, got {shown}", field_hint

    if kind == "string_too_short":
        return "must not be empty", field_hint
    if kind == "string_too_long":
        return f"is too long (at most {ctx.get('max_length')} characters)", field_hint

    bounds = {
        "greater_than": ("greater than", "gt"),
        "greater_than_equal": ("at least", "ge"),
        "less_than": ("less than", "lt"),
        "less_than_equal": ("at most", "le"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        limit = ctx.get(key)
        return f"must be {words} {limit}, got {_short_number(value)}", field_hint

    if kind == "literal_error":
        choices = _literal_choices(loc, ctx)
        listed = ", ".join(_show_choice(c) for c in choices)
        texts = [c for c in choices if isinstance(c, str)]
        guess = did_you_mean(value, texts) if isinstance(value, str) and texts else None
        if guess:
            hint = f"did you mean '{guess}'?"
        elif isinstance(value, str) and any(value == str(c) for c in choices):
            hint = "remove the quotes: numbers are written bare"
        elif not isinstance(value, str) and any(_yaml_text(value) == c for c in texts):
            hint = f'quote it: "{_yaml_text(value)}"'
        else:
            hint = f"choose one of {listed}"
        return f"must be one of {listed}; got {shown}", hint

    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return (
            f"expected a mapping (indented 'key: value' lines), got {shown}",
            field_hint or "write the keys of this section on indented lines below it",
        )

    if kind in ("list_type", "tuple_type", "set_type"):
        return (
            f"expected a list, got {shown}",
            "write the items as '- item' lines below the key, or inline as [a, b]",
        )

    if kind == "too_short":
        minimum = ctx.get("min_length", 1)
        return f"needs at least {minimum} item{'s' if minimum != 1 else ''}", field_hint
    if kind == "too_long":
        return f"has too many items (at most {ctx.get('max_length')})", field_hint

    if kind in ("ip_v4_address", "ip_any_address", "ip_v4_interface"):
        return (
            f"expected an IPv4 address, got {shown}",
            "write four numbers 0-255 separated by dots, e.g. 192.168.100.1",
        )

    if kind in ("value_error", "assertion_error"):
        cause = ctx.get("error")
        text = str(cause) if cause is not None else str(error.get("msg", ""))
        return text, field_hint

    return str(error.get("msg", "invalid value")), field_hint


def _short_number(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"a {int(value.bit_length() * 0.30103) + 1}-digit number"
    return str(value)


def _section_name(loc: Loc) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            if parts:
                parts[-1] += "[]"
        else:
            parts.append(part)
    return ".".join(parts) or "the top level"


__all__ = [
    "MAX_RECIPE_BYTES",
    "format_recipe_error",
    "load_recipe",
    "load_recipe_text",
    "resolve_path",
]

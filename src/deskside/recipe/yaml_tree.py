"""The YAML of a recipe as plain data, with the line and column of every key and item.

Parsing uses ruamel.yaml's round-trip loader, which remembers where every key and list item
starts. `RecipeText.read` parses the text (stage 1: YAML errors, located) and turns the YAML
tree into plain data: dicts, lists, str, int, float, bool, None (stage 2), while a table of
positions is kept for every path. What recipes never need is refused, located: tags, sets,
binary values, non-text keys, recursive aliases.

Limits keep a hostile file cheap to refuse: the size, lines and YAML indicators of the text
(`deskside.recipe.source`, checked before parsing), `MAX_VALUES` values after expanding
aliases (the "billion laughs"), `MAX_DEPTH` levels of nesting.
"""

from __future__ import annotations

import datetime
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, CommentedSet, TaggedScalar
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError

from deskside.errors import RecipeError
from deskside.recipe.problems import Found, LocPath, combine_errors, format_field
from deskside.recipe.source import (
    MAX_RECIPE_BYTES,
    TOO_BIG_HINT,
    text_bound_problem,
    too_big_message,
)
from deskside.recipe.wording import describe_value

MAX_VALUES = 20_000  # values after expanding YAML aliases ("billion laughs" guard)
MAX_DEPTH = 32  # nesting depth of the recipe data

_STANDARD_TAG = "tag:yaml.org,2002:"

_SYNTAX_HINT = (
    "check the indentation (spaces, aligned under the parent key) and the quoting on this "
    "line and the one before"
)


@dataclass
class Tree:
    """Plain data converted from the YAML tree, with the position of every path."""

    data: Any = None
    positions: dict[LocPath, tuple[int, int]] = field(default_factory=dict)  # 0-based
    # (path, problem, whether pydantic errors at or below the path repeat it)
    problems: list[tuple[LocPath, Found, bool]] = field(default_factory=list)
    values: int = 0


class _TooMany(Exception):
    pass


class RecipeText:
    """The text of a recipe and the name errors show for it (`path`)."""

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

    def found(
        self, line0: int, col0: int, field_path: str | None, message: str, hint: str | None
    ) -> Found:
        """A problem at a 0-based position of the text (kept inside the document)."""
        line, column = self._clamp(line0, col0)
        return Found(line, column, field_path, message, hint)

    def error(self, line0: int, col0: int, message: str, hint: str | None) -> RecipeError:
        """A RecipeError with one problem at a 0-based position of the text."""
        return combine_errors(self.path, [self.found(line0, col0, None, message, hint)])

    # -- stage 1: YAML

    def read(self) -> Tree:
        """The plain data and positions of the recipe; RecipeError when the YAML is wrong."""
        if not isinstance(self.text, str):
            raise self.error(0, 0, "the recipe must be text", "pass the file's text")
        bound = text_bound_problem(self.text)
        if bound is not None:
            raise self.error(bound[0], 0, bound[1], TOO_BIG_HINT)
        document = self._parse()
        if document is None:
            raise self.error(
                self._first_content_line() - 1,
                0,
                "the recipe is empty",
                "a recipe is a YAML mapping with at least name, cluster, model and engine; "
                "see recipes/local-tiny.yaml",
            )
        if not isinstance(document, CommentedMap):
            line, col = self._start_of(document)
            raise self.error(
                line,
                col,
                f"the recipe must be a mapping of keys (name:, cluster:, ...), found "
                f"{describe_value(self._plain_preview(document))}",
                "start the file with top-level keys such as 'name: my-recipe'",
            )
        return self._convert(document)

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
                raise self.error(0, 0, f"YAML error: {exc}", _SYNTAX_HINT) from None
            except RecursionError:
                raise self.error(
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
        return self.error(line, col, message, "a key may appear once per mapping; keep one of them")

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
            return self.error(
                line,
                col,
                "a recipe is a single YAML document, but another one starts here",
                "remove the '---' line and everything after it, or put each recipe in its own file",
            )
        if "\\t" in problem or "\t" in problem:
            return self.error(
                line,
                col,
                "YAML does not allow a tab character here (tabs cannot indent)",
                "indent with spaces only",
            )
        if "undefined alias" in problem:
            return self.error(
                line, col, problem, "define the anchor (&name) before using the alias (*name)"
            )
        text = problem or context or "invalid YAML"
        if context and problem and context not in problem:
            started = exc.context_mark
            if started is not None and started.line != line:
                context = f"{context} started at line {min(started.line + 1, self.line_count)}"
            text = f"{problem} ({context})"
        return self.error(line, col, f"YAML syntax error: {text}", _SYNTAX_HINT)

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
        return self.error(
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
        return self.error(
            line,
            col,
            f"cannot read this value: {reason}",
            "check the value; quote it if it is text",
        )

    # -- stage 2: YAML tree -> plain data + positions

    def _convert(self, document: CommentedMap) -> Tree:
        tree = Tree()
        tree.positions[()] = self._start_of(document)
        try:
            tree.data = self._plain(document, (), tree, 0, ())
        except _TooMany:
            line, col = tree.positions[()]
            raise self.error(
                line,
                col,
                f"the recipe expands to more than {MAX_VALUES} values (YAML aliases?)",
                "a recipe is a page of YAML; avoid aliases that refer to large structures",
            ) from None
        return tree

    def _problem(self, tree: Tree, loc: LocPath, message: str, hint: str | None) -> None:
        line, col = tree.positions.get(loc, tree.positions[()])
        tree.problems.append(
            (loc, self.found(line, col, format_field(loc) or None, message, hint), True)
        )

    def _plain(
        self, node: Any, loc: LocPath, tree: Tree, depth: int, stack: tuple[int, ...]
    ) -> Any:
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
        self, node: CommentedMap, loc: LocPath, tree: Tree, depth: int, stack: tuple[int, ...]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        fallback = tree.positions.get(loc, self._start_of(node))
        for key in list(node.keys()):
            position = _lc_get(node, key) or fallback
            if not isinstance(key, str) or isinstance(key, TaggedScalar):
                line, col = position
                shown = describe_value(key) if isinstance(key, int | float | bool) else None
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
                        self.found(
                            line,
                            col,
                            format_field(loc) or None,
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


__all__ = [
    "MAX_DEPTH",
    "MAX_RECIPE_BYTES",
    "MAX_VALUES",
    "TOO_BIG_HINT",
    "RecipeText",
    "Tree",
    "too_big_message",
]

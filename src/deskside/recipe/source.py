"""Reading a recipe file, bounded: a regular file of at most `MAX_RECIPE_BYTES`, whose text
has at most `MAX_LINES` lines of at most `MAX_LINE_CHARS` characters, and `MAX_INDICATORS`
YAML indicators.

A recipe is a page of YAML (the flagship is about 10 KiB, 200 lines and 200 indicators).
The YAML parser is pure Python and spends about 0.1 ms per token, so a hostile file is
refused before it is parsed: by kind (a FIFO, a device such as /dev/zero, a folder; a
symbolic link is followed and its target checked), by size (from `fstat`, before reading a
byte), then by its lines, their length, its YAML indicators (`-`, `:`, `,`, `[`, `{`,
anchors, aliases, tags) and the brackets open at once, which bound the work of the parser.
Aliases that expand to many values ("billion laughs") and deep block nesting are refused
later, while the YAML tree is turned into data (`deskside.recipe.yaml_tree`).

Every refusal is a located `RecipeError` (exit code 2) that says what to do.
"""

from __future__ import annotations

import errno
import os
import re
import stat

from deskside.errors import Location, RecipeError
from deskside.recipe.problems import single_error
from deskside.units import KIB

MAX_RECIPE_BYTES = 256 * KIB  # 25x the flagship; parsing this much takes well under a second
MAX_LINES = 5_000  # lines of text, comments included (the flagship has about 200)
MAX_INDICATORS = 2_000  # YAML indicators (the flagship has about 200)
MAX_LINE_CHARS = 16 * KIB  # one line; the parser's time grows with the square of a comment's
MAX_FLOW_DEPTH = 32  # brackets open at once ([ and {); the YAML parser recurses per level

TOO_BIG_HINT = "a recipe is a page of YAML; check that this is the right file"

# What starts a YAML token: flow indicators, block entries ('- '), mapping values (': '),
# anchors, aliases and tags. Over-counted inside quoted text, which is harmless at this cap.
_INDICATOR = re.compile(r"[\[\]{},&*!]|(?<!\S)-(?=\s)|:(?=\s)")
_LONG_LINE = re.compile(rf"[^\n]{{{MAX_LINE_CHARS + 1}}}")
_BRACKET = re.compile(r"[\[\]{}]")

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def too_big_message(size: int) -> str:
    """The problem of a recipe of `size` bytes, over MAX_RECIPE_BYTES."""
    return f"the recipe is too large ({size} bytes; at most {MAX_RECIPE_BYTES})"


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _refuse(shown: str, message: str, hint: str) -> RecipeError:
    return RecipeError(f"{shown}: {message}", hint=hint, location=Location(shown))


def read_recipe_bytes(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the recipe file at `path`: a regular file (or a link to one), at most
    MAX_RECIPE_BYTES. Raises RecipeError (exit code 2) for anything else.

    A link is resolved first and its target checked and opened without following links
    again, so what is checked is what is read."""
    shown = os.fspath(path)
    try:
        real = os.path.realpath(path)
        info = os.lstat(real)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _refuse(
            shown, f"cannot read the recipe: {reason}", "check the path; recipes are YAML files"
        ) from None
    shown_kind = f"links to {real}, which is" if real != os.path.abspath(shown) else "is"
    if stat.S_ISLNK(info.st_mode):
        raise _refuse(
            shown,
            "the recipe is a symbolic link that never reaches a file (a loop?)",
            "give the path of the recipe file itself",
        )
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(
            shown,
            f"the recipe {shown_kind} {_kind(info.st_mode)}, not a regular file",
            "give the path of a recipe YAML file",
        )
    if info.st_size > MAX_RECIPE_BYTES:
        raise single_error(shown, 1, 1, None, too_big_message(info.st_size), TOO_BIG_HINT)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(
                shown,
                "the recipe changed into a symbolic link while deskside opened it",
                "give the path of the recipe file itself",
            ) from None
        raise _refuse(
            shown,
            f"cannot read the recipe: {exc.strerror or exc}",
            "check the path and its permissions",
        ) from None
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise _refuse(
                shown,
                f"the recipe is {_kind(opened.st_mode)}, not a regular file",
                "give the path of a recipe YAML file",
            )
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_RECIPE_BYTES:
            chunk = os.read(fd, MAX_RECIPE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _refuse(
            shown, f"cannot read the recipe: {exc.strerror or exc}", "check the file"
        ) from None
    finally:
        os.close(fd)
    if size > MAX_RECIPE_BYTES:  # it grew after fstat
        raise single_error(shown, 1, 1, None, too_big_message(size), TOO_BIG_HINT)
    return b"".join(chunks)


def text_bound_problem(text: str) -> tuple[int, str] | None:
    """(0-based line, message) when `text` is more than a recipe could need, else None.

    Checked before parsing: characters, lines, line length, YAML indicators, brackets open
    at once. The line is where the limit was passed."""
    if len(text) > MAX_RECIPE_BYTES:
        return 0, too_big_message(len(text))
    lines = text.count("\n")
    if lines > MAX_LINES:
        return MAX_LINES, f"the recipe has {lines} lines; a recipe has at most {MAX_LINES}"
    long_line = _LONG_LINE.search(text)
    if long_line is not None:
        line = text.count("\n", 0, long_line.start())
        return line, f"this line is longer than {MAX_LINE_CHARS} characters; recipe lines are short"
    for count, match in enumerate(_INDICATOR.finditer(text), start=1):
        if count > MAX_INDICATORS:
            line = text.count("\n", 0, match.start())
            return line, (
                f"the recipe has more than {MAX_INDICATORS} YAML indicators ('-', ':', ',', "
                "'[', '{', anchors, aliases) by this line; a recipe has a few hundred"
            )
    depth = 0
    for match in _BRACKET.finditer(text):
        depth = depth + 1 if match.group() in "[{" else max(depth - 1, 0)
        if depth > MAX_FLOW_DEPTH:
            line = text.count("\n", 0, match.start())
            return line, (
                f"more than {MAX_FLOW_DEPTH} brackets ('[' or '{{') are open at once here; a "
                "recipe is a few levels deep"
            )
    return None


__all__ = [
    "MAX_FLOW_DEPTH",
    "MAX_INDICATORS",
    "MAX_LINES",
    "MAX_LINE_CHARS",
    "MAX_RECIPE_BYTES",
    "TOO_BIG_HINT",
    "read_recipe_bytes",
    "text_bound_problem",
    "too_big_message",
]

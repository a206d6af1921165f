"""Text values of a recipe: words, names, free text, environment values, engine arguments.

Everything a recipe says ends up in a command line, a script, a unit file or a terminal, so
text is bounded and plain:

- no control characters (U+0000-U+001F, U+007F-U+009F: NUL cannot pass through execve, ESC
  rewrites the terminal, CR hides the rest of a line). Free text, environment values and
  engine arguments may hold tabs and line breaks, which every rendered format quotes;
- words and names do not start with '-', so none can be read as a command-line flag
  (vLLM's --served-model-name takes every name that follows it);
- a bounded length: `MAX_NAME` for names, `MAX_WORD` for words and paths, `MAX_TEXT` for
  free text, environment values and arguments.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator

from deskside.recipe.problems import refuse

MAX_NAME = 128  # served names, aliases
MAX_WORD = 256  # words and paths without spaces
MAX_PATH = 4096  # absolute paths on the nodes (Linux PATH_MAX)
MAX_TEXT = 4096  # free text, environment values, one engine argument

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_NO_TAB_NL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

CONTROL_HINT = "remove it: recipes hold plain printable text (write the character it stands for)"


def control_problem(value: str, *, lines: bool = False) -> str | None:
    """What is wrong when `value` holds a control character; `lines` allows tab and LF."""
    found = (_CONTROL_NO_TAB_NL if lines else _CONTROL).search(value)
    if found is None:
        return None
    code = ord(found.group())
    name = {0: " (NUL)", 0x1B: " (ESC)", 0x0D: " (CR)", 0x7F: " (DEL)"}.get(code, "")
    return f"contains a control character U+{code:04X}{name} at position {found.start() + 1}"


def _word_check(what: str, example: str, limit: int) -> Callable[[str], str]:
    def check(value: str) -> str:
        hint = f"write {what}, e.g. {example}"
        if not value or len(value) > limit:
            raise refuse(
                f"{_short(value)} is not {what}: it must be 1 to {limit} characters "
                f"(this is {len(value)})",
                hint,
            )
        problem = control_problem(value)
        if problem is not None:
            raise refuse(f"{_short(value)} {problem}", CONTROL_HINT)
        if re.search(r"\s", value):
            raise refuse(f"{_short(value)} is not {what}", hint)
        if value.startswith("-"):
            raise refuse(
                f"{_short(value)} starts with '-', so the engine would read it as a flag",
                f"write {what} that starts with a letter, a digit or '.', e.g. {example}",
            )
        return value

    return check


def _text_check(limit: int) -> Callable[[str], str]:
    def check(value: str) -> str:
        if len(value) > limit:
            raise refuse(
                f"too long: {len(value)} characters (at most {limit})",
                "shorten it; a recipe holds settings, not documents",
            )
        problem = control_problem(value, lines=True)
        if problem is not None:
            raise refuse(f"{_short(value)} {problem}", CONTROL_HINT)
        return value

    return check


def _short(value: str) -> str:
    """`value` quoted for a message, cut to 60 characters."""
    return repr(value if len(value) <= 60 else value[:57] + "...")


NoSpace = Annotated[
    str,
    AfterValidator(_word_check("a non-empty word without spaces", "'deepseek-v4-flash'", MAX_WORD)),
]
"""A word: 1-256 printable characters, no spaces, not starting with '-'."""

ServedName = Annotated[
    str,
    AfterValidator(
        _word_check(
            f"a model name (at most {MAX_NAME} printable characters without spaces)",
            "'deepseek-v4-flash'",
            MAX_NAME,
        )
    ),
]
"""A name clients send as 'model': 1-128 printable characters, not starting with '-'."""

Text = Annotated[str, AfterValidator(_text_check(MAX_TEXT))]
"""Free text, an environment value, one engine argument: at most 4096 characters, printable
but for tabs and line breaks."""


def _absolute_path(value: str) -> str:
    if not value.startswith("/") or re.search(r"\s", value) or len(value) > MAX_PATH:
        raise refuse(
            f"{_short(value)} is not an absolute path on the nodes (starting with '/', "
            f"without spaces, at most {MAX_PATH} characters)",
            "write an absolute path, e.g. '/opt/deskside'",
        )
    problem = control_problem(value)
    if problem is not None:
        raise refuse(f"{_short(value)} {problem}", CONTROL_HINT)
    return value


AbsolutePath = Annotated[str, AfterValidator(_absolute_path)]


def _bind_mount(value: str) -> str:
    parts = value.split(":")
    mode_ok = len(parts) == 2 or (len(parts) == 3 and parts[2] in ("ro", "rw"))
    if not mode_ok or not all(p.startswith("/") for p in parts[:2]):
        raise refuse(
            f"{_short(value)} is not a bind mount 'SOURCE:TARGET' or 'SOURCE:TARGET:ro'",
            "write two absolute paths without ':' in them, e.g. '/opt/venv:/opt/venv:ro'",
        )
    for path in parts[:2]:
        _absolute_path(path)
    return value


BindMount = Annotated[str, AfterValidator(_bind_mount)]
"""'SOURCE:TARGET[:ro|:rw]', two absolute paths: a folder of the node in the container."""


WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]")
"""Addresses that bind every address of the head (deskside.engine.launch reads the same)."""

_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME_RE = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")

BIND_HOST_HINT = (
    "write an address of the head (e.g. 192.168.0.27), its hostname, or 0.0.0.0 to bind "
    "every address; no scheme (http://), path or port: the port is engine.port"
)


def _bind_host(value: str) -> str:
    """vLLM --host: an IPv4 address, a hostname or a wildcard; never a URL or host:port."""
    if value in WILDCARD_HOSTS:
        return value
    problem = control_problem(value)
    if problem is not None:
        raise refuse(f"{_short(value)} {problem}", CONTROL_HINT)
    if "://" in value or "/" in value:
        raise refuse(f"{_short(value)} is a URL, not a host", BIND_HOST_HINT)
    if re.fullmatch(r"[0-9.]+", value):
        try:
            ipaddress.IPv4Address(value)
        except ValueError:
            raise refuse(f"{_short(value)} is not a valid IPv4 address", BIND_HOST_HINT) from None
        return value
    if ":" in value:
        raise refuse(
            f"{_short(value)} holds ':': a port (the port is engine.port) or an IPv6 address "
            "(deskside binds IPv4 addresses, hostnames, 0.0.0.0 or ::)",
            BIND_HOST_HINT,
        )
    if len(value) > 253 or _HOSTNAME_RE.fullmatch(value) is None:
        raise refuse(f"{_short(value)} is neither an IPv4 address nor a hostname", BIND_HOST_HINT)
    return value


BindHost = Annotated[str, AfterValidator(_bind_host)]


__all__ = [
    "BIND_HOST_HINT",
    "CONTROL_HINT",
    "MAX_NAME",
    "MAX_PATH",
    "MAX_TEXT",
    "MAX_WORD",
    "WILDCARD_HOSTS",
    "AbsolutePath",
    "BindHost",
    "BindMount",
    "NoSpace",
    "ServedName",
    "Text",
    "control_problem",
]

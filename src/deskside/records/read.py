"""The one reader of deskside's records, on this machine and on a node.

A record is read only when it is a regular file (never a link, a FIFO, a socket or a
device: refused before it is opened, and the open itself cannot block) of at most the
record's size; its JSON may nest at most MAX_DEPTH levels; it must parse into the record's
model (`extra="forbid"`, typed fields). Anything else is `BadState`: what the file is,
where, and what to do, never a traceback and never a hang. An absent record is None.

On this machine the file is opened with `deskside.smallfile` (`O_NOFOLLOW`, non-blocking,
at most `limit + 1` bytes read) and no folder between $DESKSIDE_HOME and it may be a link.
On a node the same checks run in a small shell script through the node's Transport
(`NODE_READ_SH`), which hands back at most `limit + 1` bytes.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from deskside.errors import DesksideError, Location
from deskside.home import deskside_home
from deskside.smallfile import FileTooLarge, NotRegularFile, read_small_file
from deskside.transport.base import Transport

M = TypeVar("M", bound=BaseModel)

MAX_DEPTH = 32  # records nest a handful of levels; a deeper one was not written by deskside
READ_TIMEOUT = 30.0  # seconds a node gets to hand over one record


class BadState(DesksideError):
    """A record deskside cannot trust: nothing is signalled or removed on its word."""

    exit_code = 2


# A JSON string (an unterminated one runs to the end: one pass, never quadratic), and
# every byte but the four brackets.
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPENING = frozenset(b"[{")


def nesting(data: bytes, limit: int = MAX_DEPTH) -> int:
    """How deep the arrays and objects of the JSON text `data` nest (counting stops once
    past `limit`)."""
    depth = deepest = 0
    for byte in _STRING.sub(b"", data).translate(None, _NOT_BRACKETS):
        if byte in _OPENING:
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        else:
            depth -= 1
    return deepest


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    if not errors:
        return "not its JSON"
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"])[:80]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}" if where else f"{first['msg']}{more}"


def parse(data: bytes | str, model: type[M], where: str, what: str, hint: str | None = None) -> M:
    """`data` as a `model`; BadState naming `where` and `what` ("a run record") if not."""
    raw = data.encode(errors="replace") if isinstance(data, str) else data
    refused = f"{where} is not {what} deskside wrote"
    location = Location(where)
    if nesting(raw) > MAX_DEPTH:
        raise BadState(f"{refused}: its JSON nests deeper than {MAX_DEPTH} levels", hint, location)
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise BadState(f"{refused} ({_first_error(exc)})", hint, location) from None
    except (ValueError, RecursionError):
        raise BadState(refused, hint, location) from None


def link_below_home(path: Path) -> Path | None:
    """The first folder between $DESKSIDE_HOME and `path` that is a link, if any."""
    try:
        home = Path(os.path.abspath(deskside_home()))
    except (RuntimeError, KeyError):  # no home to speak of (a service's bare environment)
        return None
    folder = Path(os.path.abspath(path)).parent
    if folder != home and home not in folder.parents:
        return None
    below = folder.relative_to(home).parts
    step = home
    for part in below:
        step = step / part
        try:
            if stat.S_ISLNK(os.lstat(step).st_mode):
                return step
        except OSError:
            return None  # absent: the read finds no record
    return None


def _link_refusal(path: Path, what: str, hint: str | None) -> BadState:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return BadState(
        f"{path} is a link (to {target}), not a regular file: not {what} deskside wrote",
        hint,
        Location(str(path)),
    )


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def read_here(
    path: Path, model: type[M], limit: int, what: str, hint: str | None = None
) -> M | None:
    """The record in `path` on this machine; None when there is none (see the module
    docstring for what is refused)."""
    link = link_below_home(path)
    if link is not None:
        raise _link_refusal(link, what, hint)
    try:
        data = read_small_file(path, limit, follow=False)
    except FileNotFoundError:
        return None
    except NotRegularFile as exc:
        where = Location(str(path))
        raise BadState(f"{path} is {exc.kind}, not a regular file", hint, where) from None
    except FileTooLarge:
        size = _size(path)
        held = f"{size:,} bytes" if size > limit else f"more than {limit:,} bytes"
        raise BadState(f"{path} holds {held}, not {what}", hint, Location(str(path))) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_refusal(path, what, hint) from None
        if exc.errno == errno.ENOTDIR:
            return None  # a file where a folder of the path belongs: no record there
        reason = exc.strerror or type(exc).__name__
        raise BadState(f"cannot read {path}: {reason}", hint, Location(str(path))) from None
    return parse(data, model, str(path), what, hint)


# A node's record, read only when it is a regular file (never a link, a FIFO or a device)
# of at most $2 bytes; at most $2 + 1 bytes are handed back. Exit 4: absent; 3: refused.
NODE_READ_SH = r"""
f=$1; max=$2
if [ -L "$f" ]; then echo "is a link, not a regular file" >&2; exit 3; fi
[ -e "$f" ] || exit 4
if [ ! -f "$f" ]; then echo "is not a regular file" >&2; exit 3; fi
size=$(wc -c < "$f")
if [ "$size" -gt "$max" ]; then echo "holds $size bytes" >&2; exit 3; fi
exec head -c "$((max + 1))" -- "$f"
"""


def node_read_argv(path: str, limit: int) -> list[str]:
    return ["sh", "-c", NODE_READ_SH, "sh", path, str(limit)]


def read_on_node(
    t: Transport, path: str, model: type[M], limit: int, what: str, hint: str | None = None
) -> M | None:
    """The record in `path` on the node `t` reaches; None when there is none. A node that
    cannot be reached raises the Transport's own error."""
    where = f"{t.name}:{path}"
    try:
        r = t.run(node_read_argv(path, limit), timeout=READ_TIMEOUT)
    except UnicodeDecodeError:
        raise BadState(f"{where} is not {what} deskside wrote (not text)", hint) from None
    if r.rc == 4:
        return None
    if not r.ok:
        why = r.stderr.strip()[-300:] or "cannot be read"
        raise BadState(f"{where} {why}", hint, Location(where))
    if len(r.stdout.encode(errors="replace")) > limit:
        raise BadState(f"{where} holds more than {limit:,} bytes, not {what}", hint)
    return parse(r.stdout, model, where, what, hint)


__all__ = [
    "MAX_DEPTH",
    "NODE_READ_SH",
    "BadState",
    "link_below_home",
    "nesting",
    "node_read_argv",
    "parse",
    "read_here",
    "read_on_node",
]

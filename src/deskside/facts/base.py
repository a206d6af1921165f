"""A fact: a command run on a node and the pure parser of what it prints.

`gather(transport, *facts)` runs every fact of one node in one `sh` process (one round trip
over SSH). Each fact runs in its own `sh -c` with its own arguments, its stderr dropped and
its output cut at the fact's byte cap; each parser gets exactly its own section. Sections
are delimited by a random marker made per round trip, so nothing a node prints (a process
title, a file's content) can end a section early or forge another fact's answer. A fact
whose command fails, runs over its cap or the round trip's deadline, or whose output its
parser refuses (`FactError`) is an `Unread` with the reason; the other facts of the round
trip are still read.
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

from deskside.transport.base import Result, Transport

T = TypeVar("T")

DEFAULT_CAP = 1024 * 1024
"""Bytes of output a fact may print unless it says otherwise."""
DEFAULT_TIMEOUT = 60.0
"""Seconds one round trip may take unless the caller says otherwise."""


class FactError(ValueError):
    """Raised by a parser for output it cannot read (the fact becomes an `Unread`)."""


@dataclass(frozen=True)
class Fact(Generic[T]):
    """`script` is POSIX sh run as `sh -c script sh ARGS...`; `parse` gets its stdout when
    it exits 0 within `cap` bytes."""

    name: str
    script: str
    parse: Callable[[str], T]
    args: tuple[str, ...] = ()
    cap: int = DEFAULT_CAP

    def argv(self) -> list[str]:
        """The fact alone, as one command."""
        return ["sh", "-c", self.script, "sh", *self.args]

    def read(self, result: Result) -> T | Unread:
        """The parsed value of one `argv()` run, or why it cannot be had."""
        if not result.ok:
            return Unread(self.name, _exit_reason(result.rc))
        return _parse(self, result.stdout)


def command_fact(
    name: str, argv: Sequence[str], parse: Callable[[str], T], cap: int = DEFAULT_CAP
) -> Fact[T]:
    """A fact of a command line that exists already (run as `exec ARGV...`)."""
    return Fact(name, 'exec "$@"', parse, args=tuple(argv), cap=cap)


@dataclass(frozen=True)
class Unread:
    """A fact that could not be read on a node, and why."""

    fact: str
    reason: str


@dataclass
class Gathered:
    """What one round trip read on `node`: each fact's parsed value or its `Unread`."""

    node: str
    values: dict[str, object] = field(default_factory=dict)

    def result(self, fact: Fact[T]) -> T | Unread:
        if fact.name not in self.values:
            return Unread(fact.name, "not gathered")
        value = self.values[fact.name]
        if isinstance(value, Unread):
            return value
        return cast(T, value)

    def get(self, fact: Fact[T]) -> T:
        """The fact's value; `FactError` naming the node and the reason when unread."""
        value = self.result(fact)
        if isinstance(value, Unread):
            raise FactError(f"{fact.name} on {self.node}: {value.reason}")
        return value

    @property
    def unread(self) -> list[Unread]:
        return [v for v in self.values.values() if isinstance(v, Unread)]


def _exit_reason(rc: int) -> str:
    if rc == 124:
        return "timed out"
    if rc == 127:
        return "a program it needs is missing"
    return f"exited with status {rc}"


def _parse(fact: Fact[T], text: str) -> T | Unread:
    try:
        return fact.parse(text)
    except FactError as exc:
        return Unread(fact.name, str(exc) or "output not understood")
    except (ValueError, IndexError, KeyError) as exc:
        return Unread(fact.name, f"output not understood ({type(exc).__name__})")


def gather_script(facts: Sequence[Fact[Any]], marker: str) -> str:
    """One sh script running every fact in turn. Per fact: `MARKER BEGIN i`, its output cut
    at its cap, `MARKER RC i STATUS` (absent when the cap cut it), `MARKER END i`."""
    out = ["export LC_ALL=C"]
    for i, fact in enumerate(facts):
        inner = " ".join(shlex.quote(a) for a in fact.argv())
        room = int(fact.cap) + len(marker) + 32  # the output, then the RC line
        out.append(
            f"printf '%s BEGIN {i}\\n' {marker}; "
            f"{{ {inner} </dev/null 2>/dev/null; printf '\\n%s RC {i} %s\\n' {marker} $?; }}"
            f" | head -c {room}; printf '\\n%s END {i}\\n' {marker}"
        )
    return "\n".join(out)


def split_sections(
    facts: Sequence[Fact[Any]], stdout: str, marker: str, rc: int
) -> dict[str, object]:
    """Each fact's value or `Unread` from the output of `gather_script`."""
    values: dict[str, object] = {}
    for i, fact in enumerate(facts):
        begin = f"{marker} BEGIN {i}\n"
        start = stdout.find(begin)
        if start < 0:
            values[fact.name] = Unread(fact.name, _exit_reason(rc) if rc else "no answer")
            continue
        start += len(begin)
        end = stdout.find(f"\n{marker} END {i}\n", start)
        rc_at = stdout.find(f"\n{marker} RC {i} ", start)
        if rc_at < 0 or (end >= 0 and rc_at > end):
            if end < 0:
                reason = _exit_reason(rc) if rc else "answer cut short"
            else:
                reason = f"printed more than its {fact.cap:,} bytes"
            values[fact.name] = Unread(fact.name, reason)
            continue
        status_line = stdout[rc_at + 1 :].split("\n", 1)[0].split()
        status = int(status_line[3]) if len(status_line) > 3 and status_line[3].isdigit() else 1
        if status != 0:
            values[fact.name] = Unread(fact.name, _exit_reason(status))
            continue
        values[fact.name] = _parse(fact, stdout[start:rc_at])
    return values


def gather(transport: Transport, *facts: Fact[Any], timeout: float = DEFAULT_TIMEOUT) -> Gathered:
    """Every fact of `facts` on the transport's node, in one round trip."""
    names = [f.name for f in facts]
    if len(set(names)) != len(names):
        raise ValueError(f"two facts share a name: {names}")
    marker = "@@deskside-fact-" + secrets.token_hex(12)
    result = transport.run(["sh", "-c", gather_script(facts, marker)], timeout=timeout)
    return Gathered(transport.name, split_sections(facts, result.stdout, marker, result.rc))

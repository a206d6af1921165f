"""Answering a facts round trip (`deskside.facts.base.gather`) from recorded outputs, for
fake nodes: the round trip's script is read back into each fact's own command line, each is
answered by the test, and the answers are framed the way the node's shell frames them."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence

from deskside.transport.base import Result
from deskside.transport.local import LocalTransport

Answer = Callable[[list[str]], Result | None]  # a fact's argv -> its answer (None: no answer)


def fact_argvs(argv: Sequence[str]) -> tuple[str, list[list[str]]] | None:
    """(the round trip's marker, each fact's argv) when `argv` is a facts round trip."""
    if len(argv) != 3 or list(argv[:2]) != ["sh", "-c"]:
        return None
    script = argv[2]
    if not script.startswith("export LC_ALL=C"):
        return None
    tokens = shlex.split(script)
    marker = ""
    facts: list[list[str]] = []
    i = 0
    while i < len(tokens):
        if tokens[i] == "printf" and i + 2 < len(tokens) and " BEGIN " in tokens[i + 1]:
            marker = tokens[i + 2].rstrip(";")
        if tokens[i] == "{":
            end = tokens.index("</dev/null", i)
            facts.append(tokens[i + 1 : end])
            i = end
        i += 1
    if not marker.startswith("@@deskside-fact-"):
        return None
    return marker, facts


def framed(marker: str, answers: Sequence[Result | None]) -> str:
    """The output of a round trip whose facts answered `answers` (None: no section)."""
    out = []
    for i, r in enumerate(answers):
        if r is None:
            continue
        out.append(f"{marker} BEGIN {i}\n{r.stdout}\n{marker} RC {i} {r.rc}\n\n{marker} END {i}\n")
    return "".join(out)


def answer_round_trip(argv: Sequence[str], answer: Answer) -> Result | None:
    """The round trip's Result, each fact answered by `answer`; None when `argv` is not a
    facts round trip."""
    found = fact_argvs(argv)
    if found is None:
        return None
    marker, facts = found
    return Result(0, framed(marker, [answer(f) for f in facts]), "")


def by_script(outputs: dict[str, str]) -> Answer:
    """Answer each fact whose script is a key of `outputs` with that output (exit 0)."""

    def answer(fact_argv: list[str]) -> Result | None:
        script = fact_argv[2] if len(fact_argv) > 2 else ""
        return Result(0, outputs[script], "") if script in outputs else None

    return answer


class AnsweringLocal(LocalTransport):
    """This machine for files (`get`), facts round trips answered by `answer`."""

    def __init__(self, answer: Answer) -> None:
        super().__init__()
        self.answer = answer
        self.round_trips = 0

    def run(self, argv, *, env=None, timeout=None, input=None):  # type: ignore[no-untyped-def]
        got = answer_round_trip(argv, self.answer)
        if got is None:
            return super().run(argv, env=env, timeout=timeout, input=input)
        self.round_trips += 1
        return got

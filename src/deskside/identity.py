"""Whether a process is deskside's own, and the one way deskside stops one.

A process is deskside's only when its pid, its start time (clock ticks after boot) and its
run tag (`deskside.facts.procs.RUN_TAG` in its environment) all match a record deskside
wrote when it started it. A pid whose start time differs is another process that reused
the number; a process without the tag is not the one deskside started. A record that lacks
any of the three (no pid, no start time, a missing or empty tag) proves nothing: what it
names is reported ("alive but unproven" at most), never signalled.

`stop_command` is the only builder of the stop (`deskside.runtime.node_sh.stop_session`):
SIGTERM to every tagged process of the recorded session, SIGKILL after a grace. It refuses
a claim it cannot prove (`Unproven`), and the shell on the node checks the start time and
the tag again right before each signal, and refuses an empty one itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from deskside.errors import DesksideError
from deskside.facts.procs import ProcessTable
from deskside.runtime import node_sh

# what deskside writes as a run tag (recipe/node/start/what: names, digits, separators)
TAG_PATTERN = re.compile(r"[A-Za-z0-9_.:@+/-]{1,512}")


class Unproven(DesksideError):
    """A record that does not prove a process deskside's: nothing is signalled on it."""

    exit_code = 2


@dataclass(frozen=True)
class Claim:
    """What a record deskside wrote says of a process it started: `what` names it for
    people ("the engine of node0", "the proxy")."""

    what: str
    pid: int | None
    start: int | None
    tag: str | None

    def problem(self) -> str | None:
        """Why the record proves nothing, or None when it names pid, start and tag."""
        if self.pid is None:
            return "the record names no pid"
        if self.pid <= 1:
            return f"pid {self.pid} is never a process deskside started"
        if self.start is None:
            return "the record has no start time"
        if not self.tag:
            return "the record has no run tag" if self.tag is None else "its run tag is empty"
        if not TAG_PATTERN.fullmatch(self.tag):
            return f"its run tag {self.tag[:80]!r} is not one deskside makes"
        return None

    @property
    def label(self) -> str:
        return f"{self.what} (pid {self.pid})" if self.pid is not None else self.what

    def refusal(self) -> str | None:
        """`what (pid P): not signalled, why (...)` for a claim that proves nothing; None
        for a whole one."""
        problem = self.problem()
        if problem is None:
            return None
        return (
            f"{self.label}: not signalled, {problem} (deskside signals only what its records "
            "prove; stop it yourself if it is yours)"
        )


State = Literal["proven", "unproven", "replaced", "zombie", "gone"]


@dataclass(frozen=True)
class Verdict:
    """What the process table says of a claim. `proven`: pid, start and tag match;
    `unproven`: the process lives but the record lacks something to prove it (`reason`);
    `replaced`: another process has the pid (start time or tag differ); `zombie`, `gone`.
    `members`: the session's processes that belong to the claim (the tagged ones; for an
    unproven claim without a tag, every live one of the session: reported, never
    signalled)."""

    state: State
    reason: str
    leads: bool = False  # the pid leads its own session (a started engine does)
    members: tuple[int, ...] = ()

    @property
    def alive(self) -> bool:
        """The recorded process runs (proven or not) and leads its session."""
        return self.state in ("proven", "unproven") and self.leads


def judge(table: ProcessTable, claim: Claim) -> Verdict:
    """The claim against the table (see `Verdict`)."""
    pid, start, tag = claim.pid, claim.start, claim.tag
    problem = claim.problem()
    tag_ok = bool(tag) and TAG_PATTERN.fullmatch(tag or "") is not None
    if pid is None or pid <= 1:
        return Verdict("gone", problem or "no pid")
    members = tuple(table.members(pid, tag)) if tag_ok and tag else ()
    p = table.get(pid)
    if p is None:
        return Verdict("gone", f"pid {pid} is gone", members=members if not problem else ())
    if start is not None and p.start_ticks != start:
        return Verdict("replaced", f"pid {pid} started at another time: it is another process now")
    if p.gone:
        return Verdict("zombie", f"pid {pid} has exited (a zombie)")
    if tag and not table.carries(pid, tag, pid):
        return Verdict("replaced", f"pid {pid} does not carry the run tag {tag[:80]}")
    leads = p.session == pid
    if problem is not None:
        everyone = members or tuple(q.pid for q in table.session(pid))
        return Verdict("unproven", problem, leads, everyone)
    return Verdict("proven", f"pid {pid}: start time and run tag match", leads, members)


def targets(table: ProcessTable, claim: Claim) -> tuple[int, ...]:
    """The processes a stop of `claim` signals, as the table shows them (the check the
    stop's shell makes on the node): none for a claim that proves nothing, or when the pid
    is another process now (start time or tag); else the session's tagged processes (a
    leader that exited leaves its tagged ranks to stop)."""
    if claim.problem() is not None:
        return ()
    assert claim.pid is not None and claim.tag is not None
    p = table.get(claim.pid)
    if p is not None and (
        p.start_ticks != claim.start or not table.carries(claim.pid, claim.tag, claim.pid)
    ):
        return ()
    return tuple(table.members(claim.pid, claim.tag))


def stop_command(claim: Claim, grace: float) -> list[str]:
    """The command that stops what `claim` names (see the module docstring). `Unproven`
    for a record that does not name pid, start time and run tag."""
    refusal = claim.refusal()
    if refusal is not None:
        raise Unproven(refusal)
    assert claim.pid is not None and claim.start is not None and claim.tag is not None
    return node_sh.stop_session(claim.pid, grace, claim.start, claim.tag)


def stop_named(pid: int, start: int | None) -> list[str]:
    """SIGTERM to a process a person named (`deskside doctor --stop-pid`), only while the
    pid still has the start time the scan saw; `Unproven` without one."""
    if pid <= 1 or start is None:
        raise Unproven(f"pid {pid}: no start time seen for it: not signalled")
    return node_sh.stop_pid(pid, start)


__all__ = [
    "Claim",
    "Unproven",
    "Verdict",
    "judge",
    "stop_command",
    "stop_named",
    "targets",
]

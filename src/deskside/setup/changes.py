"""What `deskside setup` would change on a node: its wants (`deskside.setup.wanted`)
against what the node holds (`deskside.setup.seen.Held`) and what deskside recorded there
(`deskside.records.setup`). Pure.

A wanted file that is absent is written; one holding the wanted bytes is left as it is; one
deskside wrote and nobody changed since (its sha256 is the recorded one) is rewritten; any
other (someone else's, or changed since deskside wrote it, or a link) stops the setup of
that node before anything is changed there: deskside touches only what it can prove it
wrote. Undo (`undo_steps`) removes the recorded files that still have the recorded bytes
and the recorded lines, disables the units it enabled, and keeps the rest, saying why.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

from deskside.records.setup import SetupRecord
from deskside.setup.seen import Held
from deskside.setup.wanted import NETPLAN_DIR, NETWORKD_DIR, NodeWants, WantFile

Kind = Literal[
    "write", "rewrite", "add-line", "keygen", "enable", "remove", "remove-line", "disable"
]


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Step:
    kind: Kind
    path: str  # a file, or a unit's name (enable, disable)
    what: str
    text: str = ""  # the content written (write, rewrite), the line (add-line, remove-line)
    mode: int = 0o644


@dataclass
class NodeChanges:
    node: str
    steps: list[Step] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # what is already as wanted
    problems: list[tuple[str, str]] = field(default_factory=list)  # (what, how to fix)
    kept: list[str] = field(default_factory=list)  # undo: what it leaves, and why

    @property
    def network_changed(self) -> bool:
        return any(
            s.kind in ("write", "rewrite", "remove")
            and s.path.startswith((NETWORKD_DIR, NETPLAN_DIR))
            for s in self.steps
        )

    @property
    def units_changed(self) -> bool:
        return any(
            s.kind in ("write", "rewrite", "remove") and ".service" in s.path for s in self.steps
        )


def _file_step(f: WantFile, state: str, record: SetupRecord | None, out: NodeChanges) -> None:
    wanted = sha256_of(f.text)
    mine = record.file(f.path) if record else None
    if state == "absent":
        out.steps.append(Step("write", f.path, f.what, f.text, f.mode))
    elif state == wanted:
        out.unchanged.append(f"{f.path} ({f.what})")
    elif mine is not None and mine.sha256 == state:
        out.steps.append(Step("rewrite", f.path, f.what, f.text, f.mode))
    elif mine is not None:
        out.problems.append(
            (
                f"{f.path} changed since deskside wrote it",
                "look at it, then move it away (deskside writes it again) or leave "
                "this node out until it is as deskside wrote it",
            )
        )
    else:
        why = "is a link" if state == "link" else "exists and deskside did not write it"
        out.problems.append(
            (f"{f.path} {why}", "move it away (deskside then writes its own) or remove it")
        )


def node_changes(wants: NodeWants, held: Held, record: SetupRecord | None) -> NodeChanges:
    out = NodeChanges(wants.node)
    if wants.key is not None:
        if held.public_key is None:
            state = held.files.get(wants.key.path, "absent")
            if state != "absent":
                out.problems.append(
                    (
                        f"{wants.key.path} exists without its .pub",
                        f"remove it, or make its public half: ssh-keygen -y -f "
                        f"{wants.key.path} > {wants.key.path}.pub",
                    )
                )
            else:
                out.steps.append(Step("keygen", wants.key.path, wants.key.comment, mode=0o600))
        else:
            out.unchanged.append(f"{wants.key.path} (the head's key for the workers)")
    for f in wants.files:
        _file_step(f, held.files.get(f.path, "absent"), record, out)
    for line in wants.lines:
        if held.lines.get(line.path):
            out.unchanged.append(f"{line.path}: {line.what}")
        else:
            out.steps.append(Step("add-line", line.path, line.what, line.line, 0o600))
    for unit in wants.units:
        if held.units.get(unit) == "enabled":
            out.unchanged.append(f"{unit} enabled")
        else:
            out.steps.append(Step("enable", unit, "enabled and started"))
    return out


def undo_files(record: SetupRecord) -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """What undo asks the node about: files, lines, units."""
    files = [w.path for w in record.written if w.kind == "file"]
    lines = [(w.path, w.line) for w in record.written if w.kind == "line"]
    return files, lines, list(record.enabled)


def undo_steps(record: SetupRecord, held: Held) -> NodeChanges:
    out = NodeChanges(record.node)
    for unit in record.enabled:
        out.steps.append(Step("disable", unit, "enabled by setup"))
    for w in record.written:
        if w.kind == "line":
            if held.lines.get(w.path):
                out.steps.append(Step("remove-line", w.path, w.what, w.line))
            else:
                out.kept.append(f"{w.path}: the line deskside added is no longer there")
            continue
        state = held.files.get(w.path, "absent")
        if state == "absent":
            out.kept.append(f"{w.path}: already gone")
        elif state == w.sha256:
            out.steps.append(Step("remove", w.path, w.what))
        else:
            out.kept.append(f"{w.path}: changed since deskside wrote it, left as it is")
    return out

"""`deskside setup` on the nodes: read (`survey`), then carry out the changes (`apply`) or
take them back (`undo`), each through the node's Transport; every file and line written is
recorded in the node's `setup.json` (`deskside.records.setup`) as it is written."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from deskside.errors import DesksideError, UsageError
from deskside.facts.base import gather
from deskside.layout import NodeLayout
from deskside.recipe.types import Node, Recipe
from deskside.records.read import read_on_node
from deskside.records.setup import MAX_SETUP_BYTES, SETUP_FILE, SetupRecord, Written
from deskside.records.write import write_on_node
from deskside.runtime.ops import at_once
from deskside.setup import wanted as w
from deskside.setup.changes import (
    NodeChanges,
    Step,
    node_changes,
    sha256_of,
    undo_files,
    undo_steps,
)
from deskside.setup.seen import About, Held, about, held
from deskside.setup.services import exporter_files
from deskside.transport.base import Transport

Say = Callable[[str], None]
TIMEOUT = 60.0


def _quiet(msg: str) -> None:
    pass


@dataclass
class Survey:
    recipe: Recipe
    options: w.Options
    changes: dict[str, NodeChanges]
    notes: list[str] = field(default_factory=list)
    wants: dict[str, w.NodeWants] = field(default_factory=dict)
    records: dict[str, SetupRecord | None] = field(default_factory=dict)
    about: dict[str, About] = field(default_factory=dict)
    recipe_path: Path = Path(".")

    @property
    def problems(self) -> list[tuple[str, str, str]]:
        return [(n, what, fix) for n, c in self.changes.items() for what, fix in c.problems]

    @property
    def steps(self) -> int:
        return sum(len(c.steps) for c in self.changes.values())


def record_path(recipe: Recipe) -> str:
    return posixpath.join(NodeLayout.of(recipe).recipe_dir, SETUP_FILE)


def read_record(t: Transport, recipe: Recipe) -> SetupRecord | None:
    path = record_path(recipe)
    return read_on_node(
        t,
        path,
        SetupRecord,
        MAX_SETUP_BYTES,
        "a setup record",
        f"deskside did not write it: look at it, then remove it (rm -- {path})",
    )


def _check_nodes(recipe: Recipe) -> None:
    local = [n.name for n in recipe.cluster.nodes if n.ssh is None]
    if local:
        raise UsageError(
            f"node(s) {', '.join(local)} have no ssh: setup configures machines deskside "
            "reaches over SSH, never this one",
            hint="give each node an ssh: section (user root) in the recipe",
        )


def _about(recipe: Recipe, ts: Mapping[str, Transport]) -> dict[str, About]:
    def one(name: str) -> About:
        found = gather(ts[name], about(), timeout=TIMEOUT).result(about())
        if not isinstance(found, About):
            raise DesksideError(f"{name}: could not read the node ({found.reason})")
        return found

    return at_once([n.name for n in recipe.cluster.nodes], one)


def _held(
    t: Transport,
    wants: w.NodeWants,
    extra: tuple[list[str], list[tuple[str, str]], list[str]] = ([], [], []),
) -> Held:
    files = [f.path for f in wants.files] + extra[0]
    lines = [(ln.path, ln.line) for ln in wants.lines] + extra[1]
    units = list(wants.units) + extra[2]
    fact = held(files, lines, units, wants.key.path if wants.key else None)
    found = gather(t, fact, timeout=TIMEOUT).result(fact)
    if not isinstance(found, Held):
        raise DesksideError(f"{t.name}: could not read what setup holds there ({found.reason})")
    return found


def link_problems(node: Node, a: About) -> list[tuple[str, str]]:
    """The recipe's fabric interface is on the node, and its address on no other one (a
    multi-NIC host with the addresses mixed up)."""
    if node.fabric is None:
        return []
    iface, address = node.fabric.interface, str(node.fabric.address)
    out = []
    if a.interfaces and iface not in a.interfaces:
        out.append(
            (
                f"no interface {iface} on {node.name} (it has {', '.join(a.interfaces)})",
                "set cluster.nodes[].fabric.interface to the fabric port's name as "
                "`ip link` shows it",
            )
        )
    elsewhere = sorted({i for i, addr in a.addresses if addr == address and i != iface})
    if elsewhere:
        out.append(
            (
                f"{address} is already on {', '.join(elsewhere)} of {node.name}, the recipe "
                f"puts it on {iface}",
                f"check which port is cabled to the other node; remove the address from "
                f"{', '.join(elsewhere)} (ip addr del {address}/PREFIX dev {elsewhere[0]} "
                "and the file that sets it) or fix the recipe",
            )
        )
    return out


def survey(
    recipe: Recipe, recipe_path: Path, ts: Mapping[str, Transport], options: w.Options
) -> Survey:
    _check_nodes(recipe)
    found = _about(recipe, ts)
    services, notes = exporter_files(recipe, recipe_path)
    out = Survey(recipe, options, {}, notes)
    out.about = found
    pre: list[tuple[str, str, str]] = []
    for n in recipe.cluster.nodes:
        a = found[n.name]
        if a.uid != 0:
            pre.append(
                (
                    n.name,
                    "setup writes under /etc and needs root",
                    "log in as root (ssh.user: root)",
                )
            )
        if not a.systemd:
            pre.append((n.name, "systemd does not run the node", "setup needs systemd"))
        pre += [(n.name, what, fix) for what, fix in link_problems(n, a)]
        if n.role == "worker" and a.host_key is None:
            pre.append(
                (n.name, "no /etc/ssh/ssh_host_ed25519_key.pub to pin", "ssh-keygen -A on the node")
            )
    out.records = at_once(list(ts), lambda name: read_record(ts[name], recipe))
    seen = {k: w.Seen(a.home, a.netplan, a.host_key) for k, a in found.items()}
    head = next(n for n in recipe.cluster.nodes if n.role == "head")
    none: tuple[list[w.WantFile], list[str]] = ([], [])
    wants = {
        head.name: w.node_wants(recipe, head, seen, options, None, services.get(head.name, none))
    }
    head_held = _held(ts[head.name], wants[head.name])
    for n in recipe.cluster.nodes:
        if n.name != head.name:
            wants[n.name] = w.node_wants(
                recipe, n, seen, options, head_held.public_key, services.get(n.name, none)
            )
    helds = at_once(
        [n.name for n in recipe.cluster.nodes if n.name != head.name],
        lambda name: _held(ts[name], wants[name]),
    )
    helds[head.name] = head_held
    out.wants = wants
    out.recipe_path = recipe_path
    for n in recipe.cluster.nodes:
        out.changes[n.name] = node_changes(wants[n.name], helds[n.name], out.records[n.name])
    for node, what, fix in pre:
        out.changes[node].problems.insert(0, (what, fix))
    return out


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class _Recorder:
    """The node's setup record, written again after each change."""

    def __init__(self, t: Transport, recipe: Recipe, node: str, old: SetupRecord | None):
        self.t, self.path = t, record_path(recipe)
        self.record = old or SetupRecord(recipe=recipe.name, node=node, at=_now())
        self.record.at = _now()
        _run(t, ["mkdir", "-p", "--", posixpath.dirname(self.path)])

    def wrote(self, entry: Written) -> None:
        r = self.record
        r.written = [
            x
            for x in r.written
            if not (x.path == entry.path and x.kind == entry.kind and x.line == entry.line)
        ] + [entry]
        write_on_node(self.t, self.path, r)

    def enabled(self, unit: str) -> None:
        if unit not in self.record.enabled:
            self.record.enabled.append(unit)
        write_on_node(self.t, self.path, self.record)


def _run(t: Transport, argv: list[str], timeout: float = TIMEOUT) -> str:
    r = t.run(argv, timeout=timeout)
    if not r.ok:
        raise DesksideError(
            f"{t.name}: {' '.join(argv)} failed (exit {r.rc}): {r.stderr.strip()[-300:]}"
        )
    return r.stdout


def _read_text(t: Transport, path: str) -> str:
    r = t.run(["sh", "-c", 'if [ -f "$1" ]; then cat -- "$1"; fi', "sh", path], timeout=TIMEOUT)
    if not r.ok:
        raise DesksideError(f"{t.name}: cannot read {path}: {r.stderr.strip()[-200:]}")
    return r.stdout


def _sha(t: Transport, path: str) -> str:
    return _run(t, ["sha256sum", "--", path]).split()[0]


def _put(t: Transport, path: str, text: str, mode: int) -> None:
    parent = posixpath.dirname(path)
    dir_mode = "700" if parent.endswith("/.ssh") else "755"
    _run(t, ["mkdir", "-p", "-m", dir_mode, "--", parent])
    t.put(text.encode(), path, mode)


def _apply_step(t: Transport, s: Step, rec: _Recorder) -> None:
    if s.kind in ("write", "rewrite"):
        _put(t, s.path, s.text, s.mode)
        rec.wrote(Written(path=s.path, sha256=sha256_of(s.text), what=s.what))
    elif s.kind == "add-line":
        old = _read_text(t, s.path)
        new = old + ("" if not old or old.endswith("\n") else "\n") + s.text + "\n"
        _put(t, s.path, new, 0o600)
        rec.wrote(Written(path=s.path, kind="line", line=s.text, what=s.what))
    elif s.kind == "keygen":
        _run(t, ["mkdir", "-p", "-m", "700", "--", posixpath.dirname(s.path)])
        _run(t, ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", s.what, "-f", s.path])
        for path in (s.path, s.path + ".pub"):
            rec.wrote(
                Written(path=path, sha256=_sha(t, path), what="the head's key for the workers")
            )
    elif s.kind == "enable":
        # networkd at once (the link is configured next); a unit ordered after
        # network-online.target is not waited for
        wait = [] if s.path == w.NETWORKD else ["--no-block"]
        _run(t, ["systemctl", "enable", "--now", *wait, s.path], timeout=120)
        rec.enabled(s.path)


def _activate(t: Transport, wants: w.NodeWants, c: NodeChanges, say: Say) -> None:
    if c.units_changed:
        _run(t, ["systemctl", "daemon-reload"], timeout=120)
    if c.network_changed and wants.interface:
        say(f"{c.node}: applying the fabric link's configuration ({wants.interface})")
        if wants.network == "netplan":
            _run(t, ["netplan", "apply"], timeout=120)
        else:
            active = t.run(["systemctl", "is-active", w.NETWORKD], timeout=TIMEOUT)
            if active.stdout.strip() != "active":
                raise DesksideError(
                    f"{c.node}: systemd-networkd does not run there, so the fabric file "
                    "is written but not applied",
                    hint=f"see why: systemctl status {w.NETWORKD} (in a container it needs "
                    "CAP_NET_ADMIN); the file takes effect once it runs",
                )
            _run(t, ["networkctl", "reload"])
            _run(t, ["networkctl", "reconfigure", wants.interface])


def _node_apply(s: Survey, ts: Mapping[str, Transport], name: str, say: Say) -> None:
    c, t = s.changes[name], ts[name]
    rec = _Recorder(t, s.recipe, name, s.records.get(name))
    files = [x for x in c.steps if x.kind != "enable"]
    for step in files:
        say(f"{name}: {step.kind} {step.path}")
        _apply_step(t, step, rec)
    if c.units_changed:
        _run(t, ["systemctl", "daemon-reload"], timeout=120)
    for step in c.steps:
        if step.kind == "enable":
            say(f"{name}: enable {step.path}")
            _apply_step(t, step, rec)
    _activate(t, s.wants[name], c, say)


def apply(s: Survey, ts: Mapping[str, Transport], say: Say = _quiet) -> Survey:
    """Carry out the survey's changes: the head first (its key), then the workers at once
    (their line with the head's real key); returns the survey after the changes."""
    if s.problems:
        raise UsageError("setup found problems; nothing was changed")
    head = next(n for n in s.recipe.cluster.nodes if n.role == "head")
    _node_apply(s, ts, head.name, say)
    if any(x.kind == "keygen" for x in s.changes[head.name].steps):
        again = survey(
            s.recipe, s.recipe_path, ts, s.options
        )  # the workers' line with the key just made
        s.changes.update({k: v for k, v in again.changes.items() if k != head.name})
        s.records.update(again.records)
    workers = [n.name for n in s.recipe.cluster.nodes if n.name != head.name]
    at_once(workers, lambda name: _node_apply(s, ts, name, say))
    return survey(s.recipe, s.recipe_path, ts, s.options)


@dataclass
class Undo:
    changes: dict[str, NodeChanges]
    records: dict[str, SetupRecord | None]


def undo_survey(recipe: Recipe, ts: Mapping[str, Transport]) -> Undo:
    _check_nodes(recipe)
    records = at_once(list(ts), lambda name: read_record(ts[name], recipe))
    out: dict[str, NodeChanges] = {}
    for name, record in records.items():
        if record is None:
            out[name] = NodeChanges(name)
            continue
        files, lines, units = undo_files(record)
        found = gather(ts[name], held(files, lines, units, None), timeout=TIMEOUT)
        value = found.result(held(files, lines, units, None))
        if not isinstance(value, Held):
            raise DesksideError(f"{name}: could not read what setup wrote ({value.reason})")
        out[name] = undo_steps(record, value)
    return Undo(out, records)


def _node_undo(recipe: Recipe, t: Transport, c: NodeChanges, say: Say) -> None:
    network = False
    for s in c.steps:
        say(f"{c.node}: {s.kind} {s.path}")
        if s.kind == "disable":
            _run(t, ["systemctl", "disable", "--now", s.path], timeout=120)
        elif s.kind == "remove":
            _run(t, ["rm", "-f", "--", s.path])
            if posixpath.dirname(s.path).endswith(".service.d"):  # setup's drop-in folder
                t.run(["rmdir", "--", posixpath.dirname(s.path)], timeout=TIMEOUT)
            network = network or s.path.startswith((w.NETWORKD_DIR, w.NETPLAN_DIR))
        elif s.kind == "remove-line":
            old = _read_text(t, s.path)
            kept = [ln for ln in old.splitlines() if ln != s.text]
            t.put(("\n".join(kept) + "\n" if kept else "").encode(), s.path, 0o600)
    if c.units_changed:
        _run(t, ["systemctl", "daemon-reload"], timeout=120)
    if network:
        r = t.run(["networkctl", "reload"], timeout=TIMEOUT)
        if not r.ok:
            t.run(["sh", "-c", "command -v netplan >/dev/null && netplan apply"], timeout=120)
    _run(t, ["rm", "-f", "--", record_path(recipe)])


def undo(recipe: Recipe, ts: Mapping[str, Transport], u: Undo, say: Say = _quiet) -> None:
    names = [n for n, r in u.records.items() if r is not None]
    at_once(names, lambda name: _node_undo(recipe, ts[name], u.changes[name], say))

"""The memory cgroup the guard watches on this machine (`deskside.facts.cgroup` reads and
judges it): the guard's own by default, which on a node that is itself a container or a
machine under systemd-nspawn is the node's memory (its /proc/meminfo shows the host's)."""

from __future__ import annotations

from pathlib import Path

from deskside.facts import cgroup
from deskside.transport.local import LocalTransport


def layout_of(folder: Path) -> cgroup.Layout | None:
    """Which cgroup layout `folder` belongs to (None: not a memory cgroup folder)."""
    return cgroup.layout_of(LocalTransport(), str(folder))


def scope_folder(sys_root: Path, proc_root: Path, pid: str = "self") -> Path | None:
    """The memory cgroup folder of process `pid` (default: this one)."""
    found = cgroup.scope_folder(LocalTransport(), str(sys_root), str(proc_root), pid)
    return Path(found) if found is not None else None

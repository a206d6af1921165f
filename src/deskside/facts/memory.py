"""A node's memory: MemTotal, MemAvailable and swap from `<proc-root>/meminfo` (bytes), and
what is available to its engine: the smaller of MemAvailable and the headroom of the memory
cgroup it runs in (`deskside.facts.cgroup`), when a limit applies.

On a unified-memory node (GB10) CPU and GPU share this memory: MemAvailable falling under
the plan's floor is the warning before the host freezes.

Read either as a fact in a round trip (`meminfo()`), or with the transport's `get`
(`read_meminfo`, `read_available`: no process started, for the guard's samples)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from deskside.facts.base import Fact, FactError
from deskside.facts.cgroup import CgroupMemory, read_scope, read_text
from deskside.transport.base import Transport

KIB = 1024
MEMINFO_CAP = 64 << 10  # /proc/meminfo is ~1.5 KiB
KEYS = ("MemTotal", "MemAvailable", "SwapTotal", "SwapFree")


@dataclass(frozen=True)
class MemInfo:
    total_bytes: int
    available_bytes: int
    swap_total_bytes: int | None = None
    swap_free_bytes: int | None = None

    @property
    def used_bytes(self) -> int:
        return max(self.total_bytes - self.available_bytes, 0)


def parse_meminfo(text: str) -> MemInfo | None:
    """MemTotal, MemAvailable and swap (kB in the file, bytes here); None when either of
    the first two is missing."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep or key not in KEYS or key in values:
            continue
        number, _, unit = rest.strip().partition(" ")
        if not number.isdigit() or len(number) > 20:
            continue
        values[key] = int(number) * (KIB if unit.strip() == "kB" else 1)
    if "MemTotal" not in values or "MemAvailable" not in values:
        return None
    return MemInfo(
        values["MemTotal"],
        values["MemAvailable"],
        values.get("SwapTotal"),
        values.get("SwapFree"),
    )


def _meminfo_fact(text: str) -> MemInfo:
    found = parse_meminfo(text)
    if found is None:
        raise FactError("no MemTotal or MemAvailable")
    return found


def meminfo(proc_root: str = "/proc") -> Fact[MemInfo]:
    name = "meminfo" if proc_root == "/proc" else f"meminfo {proc_root}"
    script = 'exec cat -- "$1/meminfo"'
    return Fact(name, script, _meminfo_fact, args=(proc_root,), cap=MEMINFO_CAP)


def read_meminfo(t: Transport, proc_root: str = "/proc") -> MemInfo | None:
    """`<proc-root>/meminfo` through `t.get`; None when it is unreadable or lacks the two
    lines."""
    text = read_text(t, posixpath.join(proc_root, "meminfo"))
    return parse_meminfo(text) if text is not None else None


@dataclass(frozen=True)
class Available:
    """The memory available to a node's engine: the smaller of MemAvailable and the memory
    cgroup's headroom (when a limit applies to the scope)."""

    mem_available: int | None
    cgroup: CgroupMemory | None

    @property
    def cgroup_headroom(self) -> int | None:
        return self.cgroup.headroom if self.cgroup is not None else None

    @property
    def available(self) -> int | None:
        values = [v for v in (self.mem_available, self.cgroup_headroom) if v is not None]
        return min(values) if values else None

    @property
    def source(self) -> str:
        """What the available figure is."""
        headroom = self.cgroup_headroom
        if headroom is not None and (self.mem_available is None or headroom < self.mem_available):
            assert self.cgroup is not None
            return f"memory cgroup {self.cgroup.path} headroom"
        return "MemAvailable"


def read_available(t: Transport, proc_root: str, cgroup: str | None) -> Available:
    """MemAvailable of `<proc-root>/meminfo` and the headroom of the memory cgroup folder
    `cgroup` and its ancestors (None: MemAvailable only)."""
    mem = read_meminfo(t, proc_root)
    return Available(
        mem.available_bytes if mem is not None else None,
        read_scope(t, cgroup) if cgroup is not None else None,
    )

"""The memory cgroup of a scope: its limit, usage and headroom, under either cgroup layout.

- v1 (`<sys-root>/fs/cgroup/memory/<path>`): memory.limit_in_bytes ("unlimited" is a huge
  number: PAGE_COUNTER_MAX pages, 2^63 less a page), memory.usage_in_bytes, and
  total_inactive_file in memory.stat (inactive_file in a cgroup without children's totals).
- v2 (`<sys-root>/fs/cgroup/<path>`): memory.max ("max" when unlimited), memory.current,
  and inactive_file in memory.stat.

Headroom is the limit less the working set, usage less the inactive file cache the kernel
reclaims first (as cAdvisor's container_memory_working_set_bytes counts it): page cache of
model weights read once must not look like memory in use. A limit on any ancestor applies
too, so the scope's headroom is the smallest over it and its ancestors that have a limit.

The files are read with the transport's `get` (in this process on this machine: the guard
reads them when memory is short, when starting a process is what may fail). Parsers are
pure; every read is bounded.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Literal

from deskside.errors import DesksideError
from deskside.transport.base import Transport

Layout = Literal["v1", "v2"]
V1_UNLIMITED = 1 << 62  # any v1 limit at or above this is "unlimited" (4 KiB and 64 KiB pages)
FILE_LIMIT = 64 << 10
MAX_DEPTH = 64
FILES: dict[Layout, tuple[str, str]] = {
    "v1": ("memory.limit_in_bytes", "memory.usage_in_bytes"),
    "v2": ("memory.max", "memory.current"),
}
INACTIVE_KEYS: dict[Layout, tuple[str, ...]] = {
    "v1": ("total_inactive_file", "inactive_file"),
    "v2": ("inactive_file",),
}


@dataclass(frozen=True)
class CgroupMemory:
    path: str  # the cgroup folder read
    layout: Layout
    limit: int
    usage: int
    inactive_file: int

    @property
    def working_set(self) -> int:
        return max(self.usage - self.inactive_file, 0)

    @property
    def headroom(self) -> int:
        return max(self.limit - self.working_set, 0)


def parse_limit(text: str, layout: Layout) -> int | None:
    """The limit in bytes; None when there is none (or the file is not a number)."""
    value = text.strip()
    if layout == "v2" and value == "max":
        return None
    if not value.isdigit() or len(value) > 20:
        return None
    number = int(value)
    return None if layout == "v1" and number >= V1_UNLIMITED else number


def parse_number(text: str) -> int | None:
    value = text.strip()
    return int(value) if value.isdigit() and len(value) <= 20 else None


def parse_stat_value(text: str, keys: tuple[str, ...]) -> int:
    """The first of `keys` found in a memory.stat text (0 when none is)."""
    values = {}
    for line in text.splitlines():
        key, _, number = line.partition(" ")
        if number.strip().isdigit() and len(number.strip()) <= 20:
            values[key] = int(number.strip())
    return next((values[k] for k in keys if k in values), 0)


def parse_proc_cgroup(text: str) -> dict[Layout, str]:
    """The memory cgroup paths in a `/proc/PID/cgroup`: v1's `N:...memory...:/path` and
    v2's `0::/path`."""
    out: dict[Layout, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        if parts[0] == "0" and parts[1] == "":
            out["v2"] = parts[2]
        elif "memory" in parts[1].split(","):
            out["v1"] = parts[2]
    return out


def read_text(t: Transport, path: str) -> str | None:
    """A small file's text, or None when it is absent, unreadable or too large."""
    try:
        data = t.get(path)
    except (OSError, DesksideError):
        return None
    return data[:FILE_LIMIT].decode(errors="replace") if len(data) <= FILE_LIMIT else None


def layout_of(t: Transport, folder: str) -> Layout | None:
    """Which layout a cgroup folder belongs to, by the files it holds."""
    if read_text(t, posixpath.join(folder, "memory.limit_in_bytes")) is not None:
        return "v1"
    for name in ("memory.max", "cgroup.controllers"):
        if read_text(t, posixpath.join(folder, name)) is not None:
            return "v2"
    return None


def read_one(t: Transport, folder: str, layout: Layout) -> CgroupMemory | None:
    """The memory of one cgroup folder; None when it has no limit or cannot be read."""
    limit_file, usage_file = FILES[layout]
    limit_text = read_text(t, posixpath.join(folder, limit_file))
    usage_text = read_text(t, posixpath.join(folder, usage_file))
    if limit_text is None or usage_text is None:
        return None
    limit, usage = parse_limit(limit_text, layout), parse_number(usage_text)
    if limit is None or usage is None:
        return None
    stat = read_text(t, posixpath.join(folder, "memory.stat")) or ""
    return CgroupMemory(folder, layout, limit, usage, parse_stat_value(stat, INACTIVE_KEYS[layout]))


def read_scope(t: Transport, folder: str) -> CgroupMemory | None:
    """The tightest limited cgroup of `folder` and its ancestors (the least headroom);
    None when no limit applies."""
    layout = layout_of(t, folder)
    if layout is None:
        return None
    best: CgroupMemory | None = None
    here = posixpath.normpath(folder)
    for _ in range(MAX_DEPTH):
        if layout_of(t, here) != layout:
            break
        found = read_one(t, here, layout)
        if found is not None and (best is None or found.headroom < best.headroom):
            best = found
        parent = posixpath.dirname(here)
        if parent == here:
            break
        here = parent
    return best


def scope_folder(t: Transport, sys_root: str, proc_root: str, pid: str = "self") -> str | None:
    """The memory cgroup folder of process `pid` (default: the reading process): v2 when
    the unified hierarchy is mounted at `<sys-root>/fs/cgroup`, else v1's memory hierarchy."""
    text = read_text(t, posixpath.join(proc_root, pid, "cgroup"))
    if text is None:
        return None
    paths = parse_proc_cgroup(text)
    base = posixpath.join(sys_root, "fs", "cgroup")
    if "v1" in paths and layout_of(t, posixpath.join(base, "memory")) == "v1":
        return posixpath.join(base, "memory", paths["v1"].lstrip("/"))
    if "v2" in paths and read_text(t, posixpath.join(base, "cgroup.controllers")) is not None:
        return posixpath.join(base, paths["v2"].lstrip("/"))
    return None

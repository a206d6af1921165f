"""The run's series of looks: `$DESKSIDE_HOME/runs/<recipe>/looks.jsonl`, one JSON object a
line, appended by `deskside status` and `deskside watch` (what a look holds:
`deskside.survive.history`).

Appends take an exclusive lock on the file and never go through a link, a FIFO or a device
(`deskside.safefs.open_append`, mode 0600). Past MAX_LOOKS_BYTES the series is cut to its
newer half. Reading hands back the lines that can be looks: JSON objects of bounded depth
(`deskside.records.read`); a file deskside cannot read as its series reads as empty.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from deskside.records.read import MAX_DEPTH, link_below_home, nesting
from deskside.records.where import looks_file
from deskside.records.write import RECORD_MODE
from deskside.safefs import open_append, write_file
from deskside.smallfile import read_small_file

MAX_LOOKS_BYTES = 8 << 20  # past this the series is cut to its newer half
MAX_READ_BYTES = 2 * MAX_LOOKS_BYTES  # a series longer than this was not deskside's


def _newer_half(data: bytes) -> bytes:
    keep = data[len(data) // 2 :]
    return keep[keep.find(b"\n") + 1 :]


def _read(path: Path) -> bytes:
    if link_below_home(path) is not None:
        return b""
    try:
        return read_small_file(path, MAX_READ_BYTES, follow=False)
    except OSError:
        return b""


def append_line(path: Path, line: str) -> None:
    """Add one JSON object on one line to the series in `path` (see the module docstring)."""
    data = (line.rstrip("\n") + "\n").encode()
    fd = open_append(path, RECORD_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_size > MAX_LOOKS_BYTES:
            # rewritten whole (renamed over the old file) while the old one is locked
            write_file(path, _newer_half(_read(path)) + data, RECORD_MODE)
            return
        os.write(fd, data)
    finally:
        os.close(fd)


def object_lines(path: Path) -> list[str]:
    """The lines of the series in `path` that can be JSON objects, oldest first."""
    out = []
    for raw in _read(path).splitlines():
        line = raw.strip()
        if line.startswith(b"{") and nesting(line) <= MAX_DEPTH:
            out.append(line.decode(errors="replace"))
    return out


def append_look_line(recipe_name: str, line: str) -> None:
    """Add one look (a JSON object on one line) to the run's series."""
    append_line(looks_file(recipe_name), line)


def look_lines(recipe_name: str) -> list[str]:
    """The lines of the run's series that can be looks, oldest first."""
    return object_lines(looks_file(recipe_name))


__all__ = ["MAX_LOOKS_BYTES", "append_line", "append_look_line", "look_lines", "object_lines"]

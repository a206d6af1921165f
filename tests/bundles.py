"""Reading a rendered bundle back from a folder, for the golden and render tests."""

from __future__ import annotations

from pathlib import Path

from deskside.errors import UsageError
from deskside.render.bundle import BUSY_LOCK


def read_bundle_dir(root: Path) -> dict[str, bytes]:
    """Every file under `root` as {relative posix path: bytes} (for diffs and tests); a
    writer's lock file is not part of the bundle."""
    if not root.is_dir():
        raise UsageError(f"{root}: no such folder")
    out: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != BUSY_LOCK:
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out

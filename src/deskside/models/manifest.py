"""`deskside model manifest`: every file of a model folder with its size and sha256.

The format (JSON): `{"format": 1, "repo": ..., "revision": ..., "files": [{"path", "size",
"sha256", "blob"}]}`; `repo` and `revision` when the folder is a snapshot of the Hugging
Face cache (`<hub>/models--org--name/snapshots/<revision>`), `blob` the name of the file in
the entry's `blobs/` its link leads to. A snapshot's links may lead only into its own
entry's `blobs/` (`deskside.models.node_files.scan`); a plain folder's only inside the
folder (`deskside.safefs.folder_files`). Any other link is refused by name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deskside.errors import Location, UsageError
from deskside.models import node_files
from deskside.safefs import folder_files, write_file
from deskside.smallfile import read_small_file

FORMAT = node_files.FORMAT


def _refuse_links(folder: Path, scan: node_files.Scan, entry: str) -> None:
    bad = [f"{p} -> {t}" for p, t in scan.foreign] + [
        f"{p} -> {t} (leads to nothing)" for p, t in scan.dangling
    ]
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise UsageError(
            f"{folder}: links that do not lead to a file in {entry}/blobs: "
            + "; ".join(bad[:5])
            + more,
            hint="a snapshot's files are links into its own cache entry's blobs/; download "
            "the revision again, or replace each link with the file it should be",
            location=Location(str(folder)),
        )


def manifest_of(
    folder: Path, *, progress: Callable[[int], None] | None = None
) -> tuple[dict[str, Any], int]:
    """The manifest of `folder` and how many files were hashed (the rest came from the
    snapshot's record, unchanged since they were hashed)."""
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder", location=Location(str(folder)))
    parts = node_files.snapshot_parts(str(folder))
    if parts is None:
        folder_files(folder)  # refuses a link out of the folder, with its own hint
    else:
        _refuse_links(folder, node_files.scan(str(folder), parts[0]), parts[0])
    data, _, hashed = node_files.folder_manifest(str(folder), progress=progress)
    return data, hashed


def total_bytes(folder: Path) -> int:
    parts = node_files.snapshot_parts(str(folder))
    return sum(f.size for f in node_files.scan(str(folder), parts[0] if parts else None).files)


MAX_MANIFEST_BYTES = 256 << 20
"""A manifest of a million files is about 200 MiB; anything larger is not one."""


def manifest_bytes(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=1) + "\n").encode()


def write_manifest(data: dict[str, Any], out: Path) -> None:
    write_file(out, manifest_bytes(data), 0o644)


def load_manifest(path: Path) -> dict[str, Any]:
    """A manifest file, checked: format 1, each file with a relative path, a size and a
    sha256."""
    where = Location(str(path))
    try:
        data = json.loads(read_small_file(path, MAX_MANIFEST_BYTES))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such manifest", location=where) from None
    except OSError as exc:
        raise UsageError(
            f"{path}: not a manifest ({exc.strerror or exc})", location=where
        ) from None
    except (ValueError, RecursionError) as exc:
        what = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
        raise UsageError(f"{path}: not a manifest ({what})", location=where) from None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(files, list):
        raise UsageError(
            f"{path}: not a manifest of format {FORMAT}",
            hint="write one with: deskside model manifest DIR --out FILE",
            location=where,
        )
    for i, f in enumerate(files):
        ok = (
            isinstance(f, dict)
            and isinstance(f.get("path"), str)
            and not f["path"].startswith("/")
            and ".." not in f["path"].split("/")
            and isinstance(f.get("size"), int)
            and isinstance(f.get("sha256"), str)
            and len(f["sha256"]) == 64
        )
        if not ok:
            raise UsageError(
                f"{path}: file entry {i} is not a path, size and sha256", location=where
            )
    return data

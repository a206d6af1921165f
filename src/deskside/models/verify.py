"""`deskside model verify`: a model folder against a manifest.

Every file is hashed by default; the snapshot's record is rewritten with what was found, so
a file that changed (even with its size and mtime kept) is seen by the next `model sync`.
`quick` takes each hash from the record where the file's size, mtime, ctime and inode are
those recorded, and hashes only the others: it finds files added, removed, resized or
written since they were hashed, not a disk that altered a byte under an unchanged file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deskside.errors import Location, UsageError
from deskside.models import node_files


@dataclass(frozen=True)
class Difference:
    path: str
    kind: str  # differs | missing | extra | foreign link | dangling link
    detail: str


@dataclass
class VerifyReport:
    folder: str
    quick: bool
    files: int = 0
    hashed: int = 0
    differences: list[Difference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "folder": self.folder,
            "quick": self.quick,
            "files": self.files,
            "hashed": self.hashed,
            "differences": [d.__dict__ for d in self.differences],
        }


def compare(expected: list[dict[str, Any]], found: dict[str, tuple[int, str]]) -> list[Difference]:
    """Manifest entries against what the folder holds (path -> (size, sha256)); pure."""
    out = []
    want = {f["path"]: f for f in expected}
    for path, f in sorted(want.items()):
        got = found.get(path)
        if got is None:
            out.append(Difference(path, "missing", f"{f['size']} bytes expected"))
        elif got[0] != f["size"]:
            out.append(Difference(path, "differs", f"{got[0]} bytes, {f['size']} expected"))
        elif got[1] != f["sha256"]:
            out.append(Difference(path, "differs", f"sha256 {got[1]}, {f['sha256']} expected"))
    for path in sorted(set(found) - set(want)):
        out.append(Difference(path, "extra", "not in the manifest"))
    return out


def verify(
    folder: Path,
    manifest: dict[str, Any],
    *,
    quick: bool = False,
    progress: Callable[[int], None] | None = None,
) -> VerifyReport:
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder", location=Location(str(folder)))
    parts = node_files.snapshot_parts(str(folder))
    entry = parts[0] if parts else None
    scan = node_files.scan(str(folder), entry)
    record = node_files.record_path(parts[0], parts[2]) if parts else None
    hashes, hashed = node_files.hash_files(
        scan.files, node_files.read_record(record), trust_record=quick, progress=progress
    )
    if record is not None and hashed:
        node_files.write_record(record, {f.path: (f.key, hashes[f.path]) for f in scan.files})
    report = VerifyReport(str(folder), quick, files=len(scan.files), hashed=hashed)
    found = {f.path: (f.size, hashes[f.path]) for f in scan.files}
    report.differences = compare(manifest["files"], found)
    where = f"{entry}/blobs" if entry else str(folder)
    report.differences += [
        Difference(p, "foreign link", f"-> {t}, outside {where}") for p, t in scan.foreign
    ]
    report.differences += [Difference(p, "dangling link", f"-> {t}") for p, t in scan.dangling]
    # a foreign or dangling link is also "missing" when the manifest has it: say it once
    links = {p for p, _ in scan.foreign} | {p for p, _ in scan.dangling}
    report.differences = [
        d for d in report.differences if not (d.kind == "missing" and d.path in links)
    ]
    return report

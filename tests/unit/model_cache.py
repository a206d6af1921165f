"""A fake Hugging Face cache entry for the model delivery tests."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

REPO = "org/tiny-model"
REVISION = "0123456789abcdef0123456789abcdef01234567"


def make_entry(hf_cache: Path, files: dict[str, bytes], revision: str = REVISION) -> Path:
    """`<hf_cache>/hub/models--org--tiny-model` with one blob per file (named by its
    sha256, as the hub names LFS blobs) and the snapshot's relative links; the snapshot."""
    entry = hf_cache / "hub" / ("models--" + REPO.replace("/", "--"))
    snap = entry / "snapshots" / revision
    (entry / "blobs").mkdir(parents=True, exist_ok=True)
    for path, data in files.items():
        blob = hashlib.sha256(data).hexdigest()
        (entry / "blobs" / blob).write_bytes(data)
        link = snap / path
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(entry / "blobs" / blob, link.parent), link)
    (entry / "refs").mkdir(exist_ok=True)
    (entry / "refs" / "main").write_text(revision)
    return snap


def flip_byte(path: Path, offset: int = 0) -> None:
    """Change one byte in place, keeping the size and the mtime."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

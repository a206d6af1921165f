"""A rendered bundle: an ordered mapping of relative POSIX paths to file bytes, with the
file mode each path is written with.

Paths look like `<node>/compose.yaml` and `cluster/prometheus/prometheus.yml`. The order is
the render order (nodes in recipe order, then `cluster/`), so iterating a bundle is
deterministic. Writing a bundle (`write`) is the only side effect here, and it is not part
of `render()`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from deskside import locks, safefs

MODE_FILE = 0o644
MODE_SCRIPT = 0o755

BUSY_LOCK = ".deskside-render.lock"
"""In a bundle folder while deskside writes it: the writer's pid (`deskside.locks`)."""

CLUSTER_DIR = "cluster"
"""The bundle folder of cluster-wide files (proxy, monitoring, lock); the head hosts it."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_path(path: str) -> str:
    pure = PurePosixPath(path)
    if (
        not path
        or pure.is_absolute()
        or any(part in ("", ".", "..") for part in path.split("/"))
        or "\\" in path
    ):
        raise ValueError(f"bundle path {path!r} must be a relative path without '.' or '..'")
    return path


@dataclass
class Bundle(Mapping[str, bytes]):
    """Rendered files: relative path -> bytes, in render order, plus each file's mode.

    `notes` carries render-time warnings (not files): things the user should know, e.g.
    an engine bound to every address while a proxy fronts it.
    """

    _files: dict[str, bytes] = field(default_factory=dict)
    _modes: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    # -- building

    def add(self, path: str, content: bytes | str, mode: int = MODE_FILE) -> None:
        """Add one file; a path can be added once."""
        _check_path(path)
        if path in self._files:
            raise ValueError(f"bundle path {path!r} rendered twice")
        data = content.encode() if isinstance(content, str) else content
        self._files[path] = data
        self._modes[path] = mode

    # -- Mapping

    def __getitem__(self, path: str) -> bytes:
        return self._files[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)

    # -- queries

    def mode(self, path: str) -> int:
        return self._modes[path]

    def sha256(self, path: str) -> str:
        return sha256_hex(self._files[path])

    def folders(self) -> list[str]:
        """Top-level folders in render order (the nodes, then `cluster`)."""
        seen: dict[str, None] = {}
        for path in self._files:
            seen.setdefault(path.split("/", 1)[0], None)
        return list(seen)

    def folder(self, name: str) -> dict[str, bytes]:
        """The files of one top-level folder, keyed by their path inside it."""
        prefix = name + "/"
        return {p[len(prefix) :]: b for p, b in self._files.items() if p.startswith(prefix)}

    # -- the one side effect

    def write(self, out_dir: Path) -> list[Path]:
        """Write every file under `out_dir` with its mode; returns the paths written.

        `out_dir` is locked while it is written (`BUSY_LOCK`: a second writer gets `Busy`
        with the holder's pid). Each file is written to a temporary file created
        exclusively beside it and renamed over it (`deskside.safefs`): a link planted in
        `out_dir` is replaced, never followed, and nothing is written outside `out_dir`.
        Folders deskside creates are 0700 whatever the umask. Files in `out_dir` that the
        bundle does not contain are left alone.
        """
        safefs.make_dirs(out_dir, root=out_dir, mode=safefs.PRIVATE_DIR)
        written: list[Path] = []
        with locks.hold(out_dir / BUSY_LOCK, f"bundle folder {out_dir}"):
            for rel, data in self._files.items():
                target = out_dir.joinpath(*rel.split("/"))
                with safefs.folder(target.parent, root=out_dir, mode=safefs.PRIVATE_DIR) as fd:
                    safefs.write_at(fd, target, data, self._modes[rel])
                written.append(target)
        return written

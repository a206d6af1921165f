"""The files of a model snapshot and their sha256, on whichever machine holds them.

Standard library only: this module also runs on the nodes, sent as `python -c` together
with `deskside.models.node_copy` (see `deskside.models.sync.node_program`), with the node's
own Python.

A snapshot of the Hugging Face cache is `<entry>/snapshots/<revision>/<path>`, each file a
relative link to `<entry>/blobs/<blob>`. `scan` lists it: a regular file, or a link whose
target (however many links it passes) is a file in the entry's own `blobs/`. A link leading
anywhere else is *foreign* (named, never read); a link to nothing is *dangling*. The hub
also keeps `<entry>/refs/<branch>`, a file holding the commit the branch was at.

Hashing is what costs (150 GB at about 1 GB/s per core), so each hash is kept in a *record*
beside the entry (`<entry>/.deskside/<revision>.json`), keyed by the file's size, mtime,
ctime and inode: a file with the same four is taken as hashed. Anything that writes into a
file changes its ctime, so even a write that restores size and mtime is hashed again; a
full `verify` hashes everything regardless and rewrites the record.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

CHUNK = 8 << 20
RECORD_DIR = ".deskside"
FORMAT = 1


@dataclass(frozen=True)
class Found:
    """A file of the folder: its relative path, what to read, its stat key, its blob name
    (None: a regular file of the folder itself)."""

    path: str
    source: str
    size: int
    key: tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode
    blob: str | None


@dataclass
class Scan:
    files: list[Found] = field(default_factory=list)
    foreign: list[tuple[str, str]] = field(default_factory=list)  # (path, link target)
    dangling: list[tuple[str, str]] = field(default_factory=list)


RECORD_CAP = 64 << 20  # a snapshot record's bytes (a few hundred per file)


def stat_key(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def snapshot_parts(folder: str) -> tuple[str, str, str] | None:
    """(entry, repo id, revision) when `folder` is `<hub>/models--org--name/snapshots/<rev>`."""
    folder = os.path.abspath(folder)
    snaps, revision = os.path.split(folder)
    entry, name = os.path.split(snaps)
    base = os.path.basename(entry)
    if name != "snapshots" or not base.startswith("models--") or not revision:
        return None
    parts = base[len("models--") :].split("--")
    return entry, "/".join(parts), revision


def record_path(entry: str, revision: str) -> str:
    return os.path.join(entry, RECORD_DIR, f"{revision}.json")


def scan(folder: str, entry: str | None) -> Scan:
    """The files of `folder`, sorted by path. `entry`: the cache entry whose `blobs/` the
    links may lead into (a snapshot); None: links may lead anywhere inside `folder`."""
    out = Scan()
    top = os.path.realpath(folder)
    blobs = os.path.realpath(os.path.join(entry, "blobs")) if entry else None
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in sorted(filenames + links):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            if entry is None and rel.split("/", 1)[0] == RECORD_DIR:
                continue
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                out.files.append(Found(rel, path, st.st_size, stat_key(st), None))
                continue
            target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else "not a regular file"
            real = os.path.realpath(path)
            if blobs is not None:
                inside = os.path.dirname(real) == blobs
            else:
                inside = real.startswith(top + os.sep)
            if not stat.S_ISLNK(st.st_mode) or not inside:
                out.foreign.append((rel, target))
                continue
            try:
                rst = os.stat(real)
            except OSError:  # gone, or a loop of links
                out.dangling.append((rel, target))
                continue
            if not stat.S_ISREG(rst.st_mode):
                out.foreign.append((rel, target))
                continue
            blob = os.path.basename(real) if blobs else None
            out.files.append(Found(rel, real, rst.st_size, stat_key(rst), blob))
    # folders were walked first-level-wise; keep one order everywhere
    out.files.sort(key=lambda f: f.path)
    return out


def sha256_file(path: str, done: Callable[[int], None] | None = None) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO or a device meanwhile
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    try:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while n := os.readv(fd, [buf]):
            h.update(view[:n])
            if done is not None:
                done(n)
    finally:
        os.close(fd)
    return h.hexdigest()


def read_record(path: str | None) -> dict[str, dict[str, object]]:
    if path is None:
        return {}
    try:  # a regular file, not a link, read whole within its cap, or no record
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return {}
            raw = os.read(fd, RECORD_CAP + 1)
        finally:
            os.close(fd)
        if len(raw) > RECORD_CAP:
            return {}
        data = json.loads(raw)
    except (OSError, ValueError, RecursionError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return files if isinstance(files, dict) else {}


def write_record(path: str, hashed: dict[str, tuple[tuple[int, int, int, int], str]]) -> bool:
    """Write the record (temporary file, then rename); False when the folder is not ours
    to write (a read-only cache stays correct, only slower)."""
    files = {
        p: {"size": k[0], "mtime_ns": k[1], "ctime_ns": k[2], "inode": k[3], "sha256": sha}
        for p, (k, sha) in sorted(hashed.items())
    }
    data = json.dumps({"format": FORMAT, "files": files}, sort_keys=True).encode()
    folder, name = os.path.split(path)
    tmp = f".{name}.{os.getpid()}.tmp"
    try:  # into the folder itself, never through a link put in its place
        os.makedirs(folder, mode=0o755, exist_ok=True)
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o644, dir_fd=dfd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        return False
    finally:
        os.close(dfd)
    return True


def recorded(entry: dict[str, object] | None, key: tuple[int, int, int, int]) -> str | None:
    """The recorded sha256 when the record's key is the file's key now."""
    if not isinstance(entry, dict):
        return None
    got = (entry.get("size"), entry.get("mtime_ns"), entry.get("ctime_ns"), entry.get("inode"))
    sha = entry.get("sha256")
    return sha if got == key and isinstance(sha, str) else None


def hash_files(
    files: list[Found],
    record: dict[str, dict[str, object]],
    *,
    trust_record: bool,
    workers: int = 0,
    progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, str], int]:
    """path -> sha256 of every file, taken from the record where its key still matches
    (when `trust_record`), else hashed (several files at once: hashlib releases the GIL).
    Returns the hashes and how many files were hashed."""
    out: dict[str, str] = {}
    todo = []
    for f in files:
        sha = recorded(record.get(f.path), f.key) if trust_record else None
        if sha is not None:
            out[f.path] = sha
            if progress is not None:
                progress(f.size)
        else:
            todo.append(f)
    lock = threading.Lock()

    def done(n: int) -> None:
        if progress is not None:
            with lock:
                progress(n)

    import concurrent.futures  # here: it costs a node program's start ~0.1 s of imports

    count = workers or min(4, os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, count)) as pool:
        # biggest first: the last file to finish is a small one
        todo.sort(key=lambda f: -f.size)
        for f, sha in zip(
            todo, pool.map(lambda f: sha256_file(f.source, done), todo), strict=False
        ):
            out[f.path] = sha
    return out, len(todo)


def manifest_dict(
    files: list[Found], hashes: dict[str, str], repo: str | None, revision: str | None
) -> dict[str, object]:
    entries: list[dict[str, object]] = []
    for f in files:
        e: dict[str, object] = {"path": f.path, "size": f.size, "sha256": hashes[f.path]}
        if f.blob is not None:
            e["blob"] = f.blob
        entries.append(e)
    out: dict[str, object] = {"format": FORMAT}
    if repo is not None:
        out["repo"] = repo
        out["revision"] = revision
    out["files"] = entries
    return out


def folder_manifest(
    folder: str,
    *,
    trust_record: bool = True,
    progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, object], Scan, int]:
    """The manifest of `folder` (a snapshot, or a plain folder), its scan, and how many
    files were hashed; a snapshot's record is rewritten with what was hashed. The caller
    refuses foreign and dangling links (the manifest leaves them out)."""
    parts = snapshot_parts(folder)
    entry, repo, revision = parts if parts else (None, None, None)
    found = scan(folder, entry)
    rec_path = record_path(entry, revision) if entry and revision else None
    hashes, hashed = hash_files(
        found.files, read_record(rec_path), trust_record=trust_record, progress=progress
    )
    if rec_path is not None and (hashed or not os.path.exists(rec_path)):
        write_record(rec_path, {f.path: (f.key, hashes[f.path]) for f in found.files})
    return manifest_dict(found.files, hashes, repo, revision), found, hashed


def safe_path(path: str) -> bool:
    parts = path.split("/")
    return not path.startswith("/") and all(p not in ("", ".", "..") for p in parts)


def refs_to(entry: str, revision: str) -> list[str]:
    """The hub's `refs/<name>` files (a branch, `pr/1`) that hold `revision`."""
    top = os.path.join(entry, "refs")
    names = []
    for dirpath, _, files in os.walk(top):
        for name in files:
            path = os.path.join(dirpath, name)
            with contextlib.suppress(OSError, UnicodeDecodeError):
                if not os.path.islink(path):
                    with open(path, encoding="ascii") as f:
                        if f.read(100).strip() == revision:
                            names.append(os.path.relpath(path, top).replace(os.sep, "/"))
    return sorted(names)


def write_refs(entry: str, revision: str, names: list[str]) -> tuple[int, list[str]]:
    """`refs/<name>` holding `revision`, as the hub writes it (no newline), each by rename;
    how many were written, and the ones that could not be."""
    have = set(refs_to(entry, revision))
    made, failed = 0, []
    for name in names:
        if not safe_path(name) or name in have:
            continue
        path = os.path.join(entry, "refs", *name.split("/"))
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.deskside-ref")
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(tmp, "w", encoding="ascii") as f:
                f.write(revision)
            os.replace(tmp, path)
            made += 1
        except OSError as exc:
            failed.append(f"refs/{name}: {exc}")
    return made, failed


def free_bytes(path: str) -> int:
    """Free bytes for an unprivileged writer on the file system of `path` (or of its
    nearest existing folder)."""
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize

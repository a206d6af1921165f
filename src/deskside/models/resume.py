"""Big files of `deskside model pull` that survive the process: resumed across runs.

huggingface_hub writes each download to a temporary file it deletes when the download
fails, so a pull stopped by Ctrl-C, SIGKILL or a power loss starts those files over. For an
LFS file of `RESUME_MIN` bytes or more that goes over plain HTTP (not Xet), deskside
downloads into a file of its own instead, `<entry>/blobs/.<sha256>.deskside-partial` (the
name `deskside model sync` uses for its partial files): named by the expected content, so
another revision or file never continues it. The next pull asks for the rest with
`Range: bytes=<size>-`; a server that answers 200 instead of 206 sends the whole file, which
then replaces the partial one. The finished file is checked against the sha256 the hub
lists and only then renamed to `blobs/<sha256>`; huggingface_hub links the snapshot to it.
A partial file is written by one pull at a time (an exclusive `flock` on it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import urlsplit

from deskside.models.hub_meta import CachePaths, Hasher, RemoteFile

if TYPE_CHECKING:
    import httpx2

RESUME_MIN = 64 << 20
SUFFIX = ".deskside-partial"
WRITE_CHUNK = 1 << 20  # what a kill can lose at most
ATTEMPTS = 5  # connections per file and run, as huggingface_hub's http_get
CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class Stopped(Exception):
    """Raised inside a download to end it (Ctrl-C)."""


class Busy(Exception):
    """Another pull is writing this partial file now."""


class BadResponse(Exception):
    """The server answered in a way a download cannot continue from."""


@dataclass
class Outcome:
    status: str  # downloaded | cached (another pull finished it) | mismatch
    actual: str | None = None
    resumed_from: int = 0  # bytes kept from an earlier run
    removed: list[str] = field(default_factory=list)


def applies(f: RemoteFile, xet: bool) -> bool:
    """Whether deskside downloads `f` itself, resumably: a big LFS file not fetched by
    hf_xet (hf_xet and its own cache handle Xet files)."""
    return f.sha256 is not None and f.size >= RESUME_MIN and not (f.xet_hash and xet)


def partial_path(paths: CachePaths, f: RemoteFile) -> str:
    return paths.blob(f".{f.blob_name}{SUFFIX}")


def partial_bytes(paths: CachePaths, files: list[RemoteFile]) -> int:
    """Bytes already held in partial files of `files` (to count them as not missing)."""
    total = 0
    for f in {f.blob_name: f for f in files}.values():
        with contextlib.suppress(OSError):
            total += min(os.lstat(partial_path(paths, f)).st_size, f.size)
    return total


def range_headers(have: int) -> dict[str, str]:
    return {"Range": f"bytes={have}-"} if have else {}


def body_offset(status: int, content_range: str | None, have: int) -> int:
    """Where the body of the answer to a request for the bytes from `have` starts in the
    file: 0 for a 200 (the whole file: the server ignored Range), `have` for a 206 that
    continues there. BadResponse for anything else."""
    if status == 200:
        return 0
    if status == 206:
        m = CONTENT_RANGE.fullmatch((content_range or "").strip())
        if m and int(m[1]) == have:
            return have
        raise BadResponse(f"the server sent bytes {content_range!r}, not from byte {have}")
    raise BadResponse(f"the server answered HTTP {status}")


def fetch(
    client: httpx2.Client,
    url: str,
    headers: dict[str, str],
    fh: BinaryIO,
    size: int,
    *,
    progress: Callable[[int], None],
    stop: threading.Event,
    on_retry: Callable[[str], None],
    timeout: float | None = 10.0,
) -> int:
    """Fill `fh` (a partial file) up to `size` bytes from `url`, asking only for what it
    lacks; returns the bytes kept from before. Dropped connections are retried with a Range
    request from the last byte written, `ATTEMPTS` times in all."""
    import httpx2

    # public (in huggingface_hub.utils.__all__) but loaded lazily, which mypy cannot see
    from huggingface_hub.utils import hf_raise_for_status  # type: ignore[attr-defined]

    have = os.fstat(fh.fileno()).st_size
    if have > size:  # not a prefix of this file
        fh.truncate(0)
        have = 0
    kept = have
    failures = 0
    while have < size:
        progress(have)
        try:
            with client.stream(
                "GET",
                url,
                headers={**headers, **range_headers(have)},
                timeout=timeout,
                follow_redirects=True,
            ) as response:
                if response.status_code == 416 and have:  # the partial is not a prefix
                    fh.truncate(0)
                    have = kept = 0
                    continue
                hf_raise_for_status(response)
                start = body_offset(
                    response.status_code, response.headers.get("Content-Range"), have
                )
                if start != have:  # 200: the whole file follows
                    fh.truncate(start)
                    have = kept = start
                    progress(have)
                fh.seek(have)
                for chunk in response.iter_bytes(WRITE_CHUNK):
                    if stop.is_set():
                        raise Stopped
                    if have + len(chunk) > size:
                        raise BadResponse(f"the server sent more than the {size} bytes listed")
                    fh.write(chunk)
                    have += len(chunk)
                    progress(have)
            if have < size:
                raise httpx2.RemoteProtocolError(f"the connection ended at byte {have}")
        except httpx2.TransportError as exc:
            failures += 1
            if failures >= ATTEMPTS:
                raise
            on_retry(f"{type(exc).__name__} at byte {have} of {size}: resuming from there")
            time.sleep(min(failures, 3))
    os.fsync(fh.fileno())
    return kept


def download(
    repo: str,
    revision: str,
    paths: CachePaths,
    f: RemoteFile,
    *,
    progress: Callable[[int], None],
    stop: threading.Event,
    on_retry: Callable[[str], None],
    client: httpx2.Client | None = None,
) -> Outcome:
    """`f` into `blobs/<sha256>` through its partial file, checked; the snapshot link is
    left to huggingface_hub."""
    from huggingface_hub import constants, get_hf_file_metadata, get_session, hf_hub_url
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    blob, part = paths.blob(f.blob_name), partial_path(paths, f)
    os.makedirs(os.path.dirname(blob), exist_ok=True)
    fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o644)
    with os.fdopen(fd, "r+b", buffering=0) as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            busy = "another pull is downloading this file now; run pull again after it"
            raise Busy(busy) from None
        if os.path.lexists(blob):  # another pull finished it while we waited
            if os.fstat(fh.fileno()).st_size == 0:
                os.unlink(part)
            return Outcome("cached")
        url = hf_hub_url(repo, f.path, revision=revision)
        meta = get_hf_file_metadata(url)
        if meta.etag != f.sha256 or meta.size != f.size:
            raise BadResponse(
                f"the hub serves sha256 {meta.etag} ({meta.size} bytes) for this file, "
                f"but lists {f.sha256} ({f.size} bytes)"
            )
        headers = build_hf_headers()
        headers["Accept-Encoding"] = "identity"  # a Range counts bytes of the file itself
        if _origin(meta.location) != _origin(url):  # a signed CDN link: no token there
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        kept = fetch(
            client or get_session(),
            meta.location,
            headers,
            fh,
            f.size,
            progress=progress,
            stop=stop,
            on_retry=on_retry,
            timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT,
        )
        actual = _sha256(fh, f.size)
        if actual != f.sha256:
            os.unlink(part)
            return Outcome("mismatch", actual, kept, [part])
        _chmod_like_folder(fh.fileno(), os.path.dirname(blob))
        os.replace(part, blob)
    return Outcome("downloaded", actual, kept)


def _sha256(fh: BinaryIO, size: int) -> str:
    h = Hasher("sha256", size)
    fh.seek(0)
    while chunk := fh.read(8 << 20):
        h.update(chunk)
    return h.digest().hex


def _chmod_like_folder(fd: int, folder: str) -> None:
    """The mode huggingface_hub gives a new blob: that of a new file in its folder
    (huggingface_hub.file_download._chmod_and_move), without touching the umask."""
    probe = os.path.join(folder, f".deskside-mode-{os.getpid()}-{threading.get_ident()}")
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        os.fchmod(fd, stat.S_IMODE(os.stat(probe).st_mode))
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc

"""`deskside model pull`'s own resumable download: which files it takes, the Range
request from a partial file, a server that ignores Range, dropped connections, the lock."""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest

from deskside.models import resume
from deskside.models.hub_meta import CachePaths, RemoteFile

DATA = bytes(range(256)) * 4096  # 1 MiB
URL = "http://hub.test/acme/m/resolve/c/model.safetensors"


def remote(size: int = resume.RESUME_MIN, sha: str | None = "a" * 64, xet: str | None = None):
    return RemoteFile("model.safetensors", size, "b" * 40, sha, xet)


def test_only_big_lfs_files_not_fetched_by_xet_are_resumable() -> None:
    assert resume.applies(remote(), xet=False)
    assert resume.applies(remote(xet="x" * 64), xet=False)  # no hf_xet: plain HTTP
    assert not resume.applies(remote(xet="x" * 64), xet=True)
    assert not resume.applies(remote(resume.RESUME_MIN - 1), xet=False)
    assert not resume.applies(remote(sha=None), xet=False)


def test_the_partial_file_is_named_by_the_expected_blob() -> None:
    paths = CachePaths("/c/hub/models--acme--m", "c" * 40)
    part = resume.partial_path(paths, remote())
    assert part == f"/c/hub/models--acme--m/blobs/.{'a' * 64}.deskside-partial"


@pytest.mark.parametrize(
    ("status", "content_range", "have", "start"),
    [(200, None, 0, 0), (200, None, 5, 0), (206, "bytes 5-9/10", 5, 5)],
)
def test_body_offset(status: int, content_range: str | None, have: int, start: int) -> None:
    assert resume.body_offset(status, content_range, have) == start


@pytest.mark.parametrize(
    ("status", "content_range"), [(206, "bytes 4-9/10"), (206, None), (302, None)]
)
def test_body_offset_refuses_what_does_not_continue(status: int, content_range: str | None) -> None:
    with pytest.raises(resume.BadResponse):
        resume.body_offset(status, content_range, 5)


def serving(data: bytes, *, honour_range: bool = True, drops: list[int] | None = None):
    """A MockTransport handler serving `data`; records the Range headers asked for."""
    asked: list[str | None] = []
    drops = list(drops or [])

    def handle(request: httpx2.Request) -> httpx2.Response:
        rng = request.headers.get("Range")
        asked.append(rng)
        start = int(rng[6:-1]) if rng and honour_range else 0
        body = data[start:]
        if drops:
            body = body[: drops.pop(0)]  # a short body: the connection ended early
        headers = {"Content-Length": str(len(body))}
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        return httpx2.Response(206 if start else 200, content=body, headers=headers)

    return handle, asked


def run_fetch(tmp_path: Path, handle: Callable[..., httpx2.Response], prefix: bytes):
    part = tmp_path / "part"
    part.write_bytes(prefix)
    seen: list[int] = []
    notes: list[str] = []
    with httpx2.Client(transport=httpx2.MockTransport(handle)) as client, part.open("r+b") as fh:
        kept = resume.fetch(
            client,
            URL,
            {},
            fh,
            len(DATA),
            progress=seen.append,
            stop=threading.Event(),
            on_retry=notes.append,
        )
    return kept, part.read_bytes(), seen, notes


def test_a_partial_file_continues_with_a_range_request(tmp_path: Path) -> None:
    handle, asked = serving(DATA)
    kept, got, seen, _ = run_fetch(tmp_path, handle, DATA[:1000])
    assert asked == ["bytes=1000-"] and kept == 1000 and got == DATA
    assert seen[0] == 1000 and seen[-1] == len(DATA)


def test_a_server_ignoring_range_starts_over_from_byte_0(tmp_path: Path) -> None:
    handle, asked = serving(DATA, honour_range=False)
    kept, got, seen, _ = run_fetch(tmp_path, handle, b"x" * 1000)  # even a wrong prefix
    assert asked == ["bytes=1000-"] and kept == 0 and got == DATA
    assert 0 in seen


def test_a_partial_longer_than_the_file_is_dropped(tmp_path: Path) -> None:
    handle, asked = serving(DATA)
    kept, got, _, _ = run_fetch(tmp_path, handle, DATA + b"extra")
    assert asked == [None] and kept == 0 and got == DATA


def test_a_dropped_connection_resumes_from_the_last_byte_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resume.time, "sleep", lambda s: None)
    handle, asked = serving(DATA, drops=[300_000])
    kept, got, _, notes = run_fetch(tmp_path, handle, b"")
    assert asked == [None, "bytes=300000-"] and got == DATA and kept == 0
    assert len(notes) == 1 and "300000" in notes[0]


def test_the_download_gives_up_after_its_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resume.time, "sleep", lambda s: None)
    handle, asked = serving(DATA, drops=[10] * resume.ATTEMPTS)
    with pytest.raises(httpx2.TransportError):
        run_fetch(tmp_path, handle, b"")
    assert len(asked) == resume.ATTEMPTS
    assert (tmp_path / "part").stat().st_size == 10 * resume.ATTEMPTS  # kept for next time


def test_ctrl_c_stops_the_download_and_keeps_the_partial_file(tmp_path: Path) -> None:
    handle, _ = serving(DATA)
    part = tmp_path / "part"
    part.write_bytes(DATA[:10])
    stop = threading.Event()
    stop.set()
    client = httpx2.Client(transport=httpx2.MockTransport(handle))
    with client, part.open("r+b") as fh, pytest.raises(resume.Stopped):
        resume.fetch(
            client, URL, {}, fh, len(DATA), progress=lambda n: None, stop=stop, on_retry=print
        )
    assert part.read_bytes() == DATA[:10]


class Meta:
    def __init__(self, etag: str, size: int) -> None:
        self.etag, self.size, self.location = etag, size, URL


def setup_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes, listed: bytes):
    import huggingface_hub

    sha = hashlib.sha256(listed).hexdigest()
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", lambda url: Meta(sha, len(data)))
    paths = CachePaths(str(tmp_path / "models--acme--m"), "c" * 40)
    return paths, RemoteFile("model.safetensors", len(listed), "b" * 40, sha)


def download(paths: CachePaths, f: RemoteFile, data: bytes) -> resume.Outcome:
    handle, _ = serving(data)
    with httpx2.Client(transport=httpx2.MockTransport(handle)) as client:
        return resume.download(
            "acme/m",
            "c" * 40,
            paths,
            f,
            progress=lambda n: None,
            stop=threading.Event(),
            on_retry=print,
            client=client,
        )


def test_a_checked_download_becomes_the_blob(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths, f = setup_download(tmp_path, monkeypatch, DATA, DATA)
    Path(paths.blob("")).mkdir(parents=True)
    Path(resume.partial_path(paths, f)).write_bytes(DATA[:4096])
    out = download(paths, f, DATA)
    assert out.status == "downloaded" and out.resumed_from == 4096 and out.actual == f.sha256
    assert Path(paths.blob(f.sha256)).read_bytes() == DATA
    assert os.listdir(paths.blob("")) == [f.sha256]


def test_a_wrong_prefix_is_removed_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths, f = setup_download(tmp_path, monkeypatch, DATA, DATA)
    Path(paths.blob("")).mkdir(parents=True)
    part = resume.partial_path(paths, f)
    Path(part).write_bytes(b"\0" * 4096)  # the right length, the wrong bytes
    out = download(paths, f, DATA)
    assert out.status == "mismatch" and out.removed == [part] and out.actual != f.sha256
    assert os.listdir(paths.blob("")) == []


def test_two_pulls_never_write_one_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths, f = setup_download(tmp_path, monkeypatch, DATA, DATA)
    Path(paths.blob("")).mkdir(parents=True)
    part = Path(resume.partial_path(paths, f))
    part.write_bytes(DATA[:10])
    with part.open("r+b") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # another pull holds it
        with pytest.raises(resume.Busy):
            download(paths, f, DATA)
    assert part.read_bytes() == DATA[:10]


def test_partial_files_count_as_downloaded_bytes(tmp_path: Path) -> None:
    paths = CachePaths(str(tmp_path), "c" * 40)
    f, g = remote(100), RemoteFile("other", 50, "d" * 40, "e" * 64)
    Path(paths.blob("")).mkdir()
    Path(resume.partial_path(paths, f)).write_bytes(b"x" * 30)
    Path(resume.partial_path(paths, g)).write_bytes(b"x" * 80)  # longer than the file
    assert resume.partial_bytes(paths, [f, g, f]) == 30 + 50

"""`deskside model pull`: a recipe's pinned weights into a Hugging Face cache, checked.

huggingface_hub does the transfer (`hf_hub_download`, one call per file, into
`<hf_home>/hub`: the layout the engine reads offline with HF_HOME=<hf_home>): the token
from HF_TOKEN or the token file, HF_ENDPOINT, hf_xet when installed, retries that resume
a dropped transfer with a Range request. deskside adds what goes wrong on big checkpoints:
a refusal before the first byte when the disk cannot hold what is missing, a check of
every file against the digest the hub lists for the pinned commit (sha256 for LFS files,
git blob sha1 for the rest; huggingface_hub checks sizes only), the removal of a bad file
it downloaded itself, and a report of any bad file it found already there. Big LFS files
over plain HTTP are downloaded by deskside itself so that they resume across runs
(`deskside.models.resume`).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from deskside.errors import DesksideError, UsageError
from deskside.models import resume
from deskside.models.hub_meta import (
    CachePaths,
    Digest,
    Hasher,
    RemoteFile,
    check_revision,
    needed_bytes,
    safe_repo_path,
)
from deskside.models.resume import Stopped as _Stopped
from deskside.units import format_bytes

CHUNK = 8 << 20


class PullError(DesksideError):
    """The pull could not start or did not finish (network, access, disk)."""


class Progress(Protocol):
    """Where pull reports what it does (the CLI draws bars on stderr)."""

    def start(self, path: str, total: int | None, done: int) -> None: ...
    def advance(self, path: str, n: int) -> None: ...
    def finish(self, path: str, status: str) -> None: ...
    def note(self, text: str) -> None: ...


class Silent:
    def start(self, path: str, total: int | None, done: int) -> None: ...
    def advance(self, path: str, n: int) -> None: ...
    def finish(self, path: str, status: str) -> None: ...
    def note(self, text: str) -> None: ...


@dataclass(frozen=True)
class PullSpec:
    repo: str
    revision: str
    hf_home: Path  # the cache: files go under hf_home/hub (HF_HOME layout)
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    workers: int = 4
    cache_from_flag: bool = False  # hf_home came from --cache (for the messages)


@dataclass
class FileReport:
    path: str
    size: int
    status: str  # downloaded | cached | mismatch | failed
    algorithm: str
    expected: str
    actual: str | None = None
    message: str | None = None
    removed: list[str] = field(default_factory=list)
    command: str | None = None  # for a bad file deskside did not download: how to remove it
    transfer: str | None = None  # downloaded files: "xet" or "http"
    resumed_from: int | None = None  # resumable downloads: bytes kept from an earlier run


@dataclass
class PullResult:
    repo: str
    revision: str
    snapshot: str
    endpoint: str
    xet: str | None  # the hf_xet version used for Xet files; None: plain HTTP only
    xet_note: str
    token: bool
    files: list[FileReport]
    downloaded_bytes: int
    retries: int

    @property
    def ok(self) -> bool:
        return all(f.status in ("downloaded", "cached") for f in self.files)

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "repo": self.repo,
            "revision": self.revision,
            "snapshot": self.snapshot,
            "endpoint": self.endpoint,
            "xet": self.xet,
            "xet_note": self.xet_note,
            "token": self.token,
            "downloaded_bytes": self.downloaded_bytes,
            "retries": self.retries,
            "files": [f.__dict__ for f in self.files],
        }


def xet_version() -> tuple[str | None, str]:
    """The hf_xet version huggingface_hub will use for files the hub stores in Xet, or None
    and why not (it then falls back to plain HTTP)."""
    from importlib.metadata import PackageNotFoundError, version

    from huggingface_hub import constants

    if constants.HF_HUB_DISABLE_XET:
        return None, "HF_HUB_DISABLE_XET is set"
    try:
        return version("hf_xet"), "installed"
    except PackageNotFoundError:
        return None, "hf_xet is not installed"


def writable_hub(hf_home: Path, from_flag: bool) -> Path:
    """`hf_home/hub`, created when missing; a PullError with a hint when it cannot be."""
    hub = hf_home / "hub"
    where = "--cache" if from_flag else "the recipe's runtime.hf_cache"
    hint = (
        f"pull into a folder you can write with --cache DIR, or create this one for your "
        f"user: sudo install -d -o \"$(id -un)\" '{hf_home}'"
    )
    try:
        hub.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PullError(f"cannot create {hub} ({where}): {exc.strerror}", hint=hint) from None
    if not os.access(hub, os.W_OK | os.X_OK):
        raise PullError(f"{hub} ({where}) is not writable here", hint=hint)
    return hub


def remote_files(spec: PullSpec) -> list[RemoteFile]:
    """The files of the pinned commit, filtered by --include/--exclude."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    # public (in huggingface_hub.utils.__all__) but loaded lazily, which mypy cannot see
    from huggingface_hub.utils import filter_repo_objects  # type: ignore[attr-defined]

    with _hub_errors(spec):
        entries = [
            RemoteFile.from_entry(e)
            for e in HfApi().list_repo_tree(spec.repo, recursive=True, revision=spec.revision)
            if isinstance(e, RepoFile)
        ]
    bad = [f.path for f in entries if not safe_repo_path(f.path)]
    if bad:
        raise PullError(f"the hub listed paths outside the repo: {bad[:3]}")
    keep = set(
        filter_repo_objects(
            [f.path for f in entries],
            allow_patterns=list(spec.include) or None,
            ignore_patterns=list(spec.exclude) or None,
        )
    )
    return [f for f in entries if f.path in keep]


def check_space(hub: Path, paths: CachePaths, files: Sequence[RemoteFile]) -> int:
    """The bytes still missing; a PullError when the cache's disk cannot hold them."""
    present = {f.blob_name for f in files if os.path.lexists(paths.blob(f.blob_name))}
    need = needed_bytes(files, present)
    need -= resume.partial_bytes(paths, [f for f in files if f.blob_name not in present])
    free = shutil.disk_usage(hub).free
    if need > free:
        raise PullError(
            f"not enough disk for {paths.repo_folder}: {format_bytes(need)} still to download, "
            f"{format_bytes(free)} free",
            hint="free space there, pull fewer files (--include/--exclude), or pull into "
            "another disk with --cache DIR",
        )
    return need


def pull(spec: PullSpec, progress: Progress | None = None) -> PullResult:
    """Download what is missing of `spec.repo@spec.revision` and check every file."""
    from huggingface_hub import constants, get_token

    sink = progress or Silent()
    check_revision(spec.revision)
    if constants.HF_HUB_OFFLINE:
        raise UsageError(
            "HF_HUB_OFFLINE is set: pull needs to reach the hub",
            hint="run pull without HF_HUB_OFFLINE (the engine sets it for itself)",
        )
    hub = writable_hub(spec.hf_home, spec.cache_from_flag)
    paths = CachePaths.of(str(spec.hf_home), spec.repo, spec.revision)
    files = remote_files(spec)
    if not files:
        raise UsageError(
            f"no file of {spec.repo}@{spec.revision} matches --include/--exclude",
            hint="check the patterns (shell-style, e.g. '*.safetensors')",
        )
    check_space(hub, paths, files)
    xet, xet_note = xet_version()
    with _count_retries(sink) as retries:
        reports = _run_all(spec, hub, paths, files, sink, bool(xet), retries)
    for r, f in zip(reports, files, strict=True):
        if r.status == "downloaded":
            r.transfer = "xet" if f.xet_hash and xet else "http"
    return PullResult(
        repo=spec.repo,
        revision=spec.revision,
        snapshot=paths.snapshot,
        endpoint=constants.ENDPOINT,
        xet=xet,
        xet_note=xet_note,
        token=get_token() is not None,
        files=reports,
        downloaded_bytes=sum(r.size for r in reports if r.status == "downloaded"),
        retries=retries[0],
    )


def _run_all(
    spec: PullSpec,
    hub: Path,
    paths: CachePaths,
    files: list[RemoteFile],
    sink: Progress,
    xet: bool,
    retries: list[int],
) -> list[FileReport]:
    stop = threading.Event()
    reports: dict[str, FileReport] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, spec.workers))

    def retried(text: str) -> None:
        retries[0] += 1
        sink.note(text)

    futures: dict[Future[FileReport], str] = {
        pool.submit(_one, spec, hub, paths, f, sink, stop, resume.applies(f, xet), retried): f.path
        for f in files
    }
    try:
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in done:
                reports[futures[fut]] = fut.result()
    except BaseException:  # Ctrl-C (the CLI raises its own BaseException), or a bug
        stop.set()  # each download stops at its next chunk; deskside keeps its partial files
        sink.note(
            "stopping: finished files and big files' partial downloads are kept, run the "
            "same command again to go on "
            "(Ctrl-C again to quit at once)"
        )
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [reports[f.path] for f in files]


def _one(
    spec: PullSpec,
    hub: Path,
    paths: CachePaths,
    f: RemoteFile,
    sink: Progress,
    stop: threading.Event,
    own: bool = False,
    retried: Callable[[str], None] | None = None,
) -> FileReport:
    from huggingface_hub import hf_hub_download

    pointer = paths.pointer(f.path)
    had_pointer = os.path.lexists(pointer)
    had_blob = os.path.lexists(paths.blob(f.blob_name))
    digest = f.digest
    report = FileReport(f.path, f.size, "cached", digest.algorithm, digest.hex)
    checked = False
    try:
        if own and not had_pointer and not had_blob:
            mine = resume.download(
                spec.repo,
                spec.revision,
                paths,
                f,
                progress=lambda done: sink.start(f.path, f.size, done),
                stop=stop,
                on_retry=retried or sink.note,
            )
            report.resumed_from, report.actual, report.removed = (
                mine.resumed_from,
                mine.actual,
                mine.removed,
            )
            if mine.status == "mismatch":
                report.status = "mismatch"
                sink.finish(f.path, report.status)
                return report
            checked = mine.status == "downloaded"
            had_blob = mine.status == "cached"  # another pull finished it meanwhile
        got = hf_hub_download(
            spec.repo,
            f.path,
            revision=spec.revision,
            cache_dir=hub,
            tqdm_class=_bar_class(f.path, sink, stop),
        )
    except _Stopped:
        raise
    except Exception as exc:  # one file's failure is reported; the others go on
        report.status, report.message = "failed", _describe(exc)
        sink.finish(f.path, "failed")
        return report
    if os.path.normpath(got) != os.path.normpath(pointer):
        report.status = "failed"
        report.message = f"the hub served this file from another commit ({got})"
        sink.finish(f.path, "failed")
        return report
    if not had_pointer:
        report.status = "downloaded" if not had_blob else "cached"
    if checked:  # hashed before it became the blob
        sink.finish(f.path, report.status)
        return report
    sink.finish(f.path, "checking")
    try:
        actual = file_digest(Path(got), digest.algorithm, f.size)
        report.actual = actual.hex
        if actual != digest:
            report.status = "mismatch"
            report.removed, report.command = remove_bad(paths, pointer, had_pointer, had_blob)
    except OSError as exc:
        report.status, report.message = "failed", _describe(exc)
    sink.finish(f.path, report.status)
    return report


def file_digest(path: Path, algorithm: str, size: int) -> Digest:
    h = Hasher("sha256" if algorithm == "sha256" else "git-sha1", size)
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.digest()


def remove_bad(
    paths: CachePaths, pointer: str, had_pointer: bool, had_blob: bool
) -> tuple[list[str], str | None]:
    """Remove the snapshot link and blob of a bad file when this pull made them; for what
    was already there, the command that removes it."""
    blob = None
    if os.path.islink(pointer):
        blob = os.path.normpath(os.path.join(os.path.dirname(pointer), os.readlink(pointer)))
        if not paths.is_blob(blob):
            blob = None
    removed: list[str] = []
    left: list[str] = []
    for path, ours in ((blob, not had_blob), (pointer, not had_pointer)):
        if path is None or not os.path.lexists(path):
            continue
        if ours:
            os.unlink(path)  # a link into a shared store is unlinked, never followed
            removed.append(path)
        else:
            left.append(path)
    command = "rm -- " + " ".join(f"'{p}'" for p in left) if left else None
    return removed, command


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def _bar_class(path: str, sink: Progress, stop: threading.Event) -> type[_Bar]:
    return type("Bar", (_Bar,), {"path": path, "sink": sink, "stop": stop})


class _Bar:
    """What huggingface_hub needs of a tqdm class, forwarding to a `Progress`. Defining
    update_transfer makes an Xet download report one bar
    (huggingface_hub.utils._xet_progress_reporting.XetDownloadProgressReporter)."""

    path: ClassVar[str]
    sink: ClassVar[Progress]
    stop: ClassVar[threading.Event]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.total: int | None = kwargs.get("total")
        self.n = int(kwargs.get("initial") or 0)
        self.format_dict: dict[str, Any] = {"rate": None}
        self.sink.start(self.path, self.total, self.n)

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: float | None = 1) -> None:
        if self.stop.is_set():
            raise _Stopped
        step = int(n or 0)
        self.n += step
        self.sink.advance(self.path, step)

    def update_transfer(self, n: float | None = 1) -> None:
        if self.stop.is_set():
            raise _Stopped

    def set_postfix_str(self, *args: Any, **kwargs: Any) -> None: ...
    def set_transfer_postfix_str(self, *args: Any, **kwargs: Any) -> None: ...
    def set_description(self, *args: Any, **kwargs: Any) -> None: ...
    def set_description_str(self, *args: Any, **kwargs: Any) -> None: ...
    def refresh(self, *args: Any, **kwargs: Any) -> None: ...
    def close(self) -> None: ...


@contextmanager
def _count_retries(sink: Progress) -> Iterator[list[int]]:
    """Count huggingface_hub's resumed transfers (its 'Trying to resume download' warning)
    and send its warnings to `sink` instead of its own stderr handler."""
    count = [0]
    logger = logging.getLogger("huggingface_hub")

    class Forward(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = " ".join(record.getMessage().split())
            if "resume download" in text:
                count[0] += 1
            sink.note(text)

    saved = logger.handlers[:], logger.propagate
    logger.handlers = [Forward(level=logging.WARNING)]
    logger.propagate = False
    try:
        yield count
    finally:
        logger.handlers, logger.propagate = saved


@contextmanager
def _hub_errors(spec: PullSpec) -> Iterator[None]:
    """huggingface_hub's errors as PullErrors that say what to do."""
    import httpx2  # huggingface_hub's HTTP client
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    login = "log in with `hf auth login` or set HF_TOKEN (a token with read access)"
    try:
        yield
    except GatedRepoError:
        raise PullError(
            f"{spec.repo} is gated: accept its terms on the hub with the account of your token",
            hint=login,
        ) from None
    except RepositoryNotFoundError:
        raise PullError(
            f"{spec.repo} was not found at {constants.ENDPOINT} (or is private)",
            hint=f"check model.repo; for a private repo, {login}",
        ) from None
    except RevisionNotFoundError:
        raise PullError(
            f"{spec.repo} has no commit {spec.revision}",
            hint="check model.revision against the repo's history on the hub",
        ) from None
    except HfHubHTTPError as exc:
        code = exc.response.status_code if exc.response is not None else None
        hint = login if code in (401, 403) else "check HF_ENDPOINT and the network"
        raise PullError(f"the hub refused the file list: {_describe(exc)}", hint=hint) from None
    except (OSError, httpx2.TransportError) as exc:  # connection refused, DNS, TLS
        raise PullError(
            f"cannot reach {constants.ENDPOINT}: {_describe(exc)}",
            hint="check the network, a proxy (HTTPS_PROXY), or HF_ENDPOINT for a mirror",
        ) from None

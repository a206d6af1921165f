"""What the Hugging Face Hub says a file of a commit is, and whether a local copy is it.

The hub publishes one digest per file in its tree listing (`HfApi.list_repo_tree`): for an
LFS file the sha256 of its content (`lfs.oid`, also the `X-Linked-Etag` of its resolve
URL), for any other file its git blob sha1 (`oid`, the `ETag` of its resolve URL).
huggingface_hub names the blob it stores by that same etag, under
`<cache>/hub/models--org--name/blobs/`, and links `snapshots/<commit>/<path>` to it.

Pure: digests are computed over bytes handed in; no file is opened here.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

from deskside.errors import UsageError
from deskside.facts.model_folder import hf_cache_entry
from deskside.recipe.values import REVISION_HINT

COMMIT = re.compile(r"[0-9a-f]{40}")

Algorithm = Literal["sha256", "git-sha1"]


@dataclass(frozen=True)
class Digest:
    algorithm: Algorithm
    hex: str


@dataclass(frozen=True)
class RemoteFile:
    """One file of a commit as the hub lists it."""

    path: str
    size: int
    blob_id: str  # the git blob sha1 (for an LFS file: of its pointer)
    sha256: str | None = None  # LFS files: sha256 of the content
    xet_hash: str | None = None  # files the hub stores in Xet

    @classmethod
    def from_entry(cls, entry: Any) -> RemoteFile:
        """From a `huggingface_hub.hf_api.RepoFile` (tree listing or paths-info)."""
        lfs = getattr(entry, "lfs", None)
        return cls(
            path=str(entry.path),
            size=int(entry.size),
            blob_id=str(entry.blob_id).lower(),
            sha256=str(lfs.sha256).lower() if lfs is not None else None,
            xet_hash=getattr(entry, "xet_hash", None),
        )

    @property
    def digest(self) -> Digest:
        """The digest the hub publishes for the content (huggingface_hub's
        `utils._verification.verify_maps` compares the same two)."""
        if self.sha256:
            return Digest("sha256", self.sha256)
        return Digest("git-sha1", self.blob_id)

    @property
    def blob_name(self) -> str:
        """The name huggingface_hub gives the blob: the file's etag (X-Linked-Etag of an
        LFS file = its sha256, ETag of a regular file = its git blob sha1)."""
        return self.digest.hex


class Hasher:
    """Computes a `Digest` over the bytes fed to it (git-sha1: `git hash-object`)."""

    def __init__(self, algorithm: Algorithm, size: int) -> None:
        self.algorithm = algorithm
        if algorithm == "sha256":
            self._h = hashlib.sha256()
        else:
            self._h = hashlib.sha1(usedforsecurity=False)
            self._h.update(b"blob %d\0" % size)

    def update(self, chunk: bytes) -> None:
        self._h.update(chunk)

    def digest(self) -> Digest:
        return Digest(self.algorithm, self._h.hexdigest())


def check_revision(revision: str | None, where: str = "model.revision") -> str:
    """A revision pull accepts: a full 40-character lowercase hex commit."""
    if revision is None:
        raise UsageError(f"{where}: no revision: pull needs the exact commit", hint=REVISION_HINT)
    if COMMIT.fullmatch(revision):
        return revision
    if COMMIT.fullmatch(revision.lower()):
        raise UsageError(f"{where}: revision {revision!r} must be lowercase", hint=REVISION_HINT)
    raise UsageError(
        f"{where}: revision {revision!r} is not a full commit hash (40 hex characters); "
        "branches and tags move, so the weights could change under you",
        hint=REVISION_HINT,
    )


@dataclass(frozen=True)
class CachePaths:
    """Where huggingface_hub keeps one repo's files at one commit under an HF_HOME."""

    repo_folder: str  # <hf_home>/hub/models--org--name
    revision: str

    @classmethod
    def of(cls, hf_home: str, repo: str, revision: str) -> CachePaths:
        return cls(hf_cache_entry(hf_home, repo), revision)

    @property
    def snapshot(self) -> str:
        return f"{self.repo_folder}/snapshots/{self.revision}"

    def pointer(self, path: str) -> str:
        """The snapshot link of a repo file."""
        return f"{self.snapshot}/{path}"

    def blob(self, name: str) -> str:
        return f"{self.repo_folder}/blobs/{name}"

    def is_blob(self, path: str) -> bool:
        """Whether `path` names a file directly inside this repo's blobs folder."""
        p = PurePosixPath(path)
        return str(p.parent) == f"{self.repo_folder}/blobs" and p.name not in ("", ".", "..")


def needed_bytes(files: Iterable[RemoteFile], present_blobs: set[str]) -> int:
    """Bytes still to download: files whose blob is not in the cache yet (one per blob)."""
    todo = {f.blob_name: f.size for f in files if f.blob_name not in present_blobs}
    return sum(todo.values())


def safe_repo_path(path: str) -> bool:
    """A repo path that stays inside the snapshot folder (no absolute path, no `..`)."""
    p = PurePosixPath(path)
    return bool(path) and not p.is_absolute() and ".." not in p.parts and "\\" not in path

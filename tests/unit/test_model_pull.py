"""`deskside model pull`: the revision rule, the hub's digests and how a local file is
compared with them, the cache paths, and what a bad file's removal may touch."""

from __future__ import annotations

import hashlib
import io
import os
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils.sha import git_hash, sha_fileobj

from deskside.cli.model_pull import repo_of
from deskside.errors import RecipeError, UsageError
from deskside.home import embedded_recipes
from deskside.models import pull as pull_mod
from deskside.models.hub_meta import (
    Algorithm,
    CachePaths,
    Digest,
    Hasher,
    RemoteFile,
    check_revision,
    needed_bytes,
    safe_repo_path,
)
from deskside.models.pull import (
    PullError,
    PullResult,
    PullSpec,
    check_space,
    file_digest,
    remove_bad,
    writable_hub,
)
from deskside.recipe.load import load_recipe_text


def digest_of(chunks: Iterable[bytes], algorithm: Algorithm, size: int) -> Digest:
    """The digest `Hasher` gives of `chunks`, as the pull feeds it."""
    h = Hasher(algorithm, size)
    for chunk in chunks:
        h.update(chunk)
    return h.digest()


COMMIT = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
SHA = "a" * 64


def tiny_with_model(model: str, tmp_path: Path) -> tuple[Path, str]:
    text = embedded_recipes()["local-tiny"]
    text = text.replace("  path: models/tiny-deepseek-v3\n", model)
    assert model in text
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path, text


# --------------------------------------------------------------------------- revision


@pytest.mark.parametrize("rev", [COMMIT, "0" * 40])
def test_full_commit_is_accepted(rev: str) -> None:
    assert check_revision(rev) == rev


@pytest.mark.parametrize("rev", ["main", "v1.0", COMMIT[:7], COMMIT + "0", "", COMMIT.upper()])
def test_anything_but_a_full_commit_is_refused_with_a_hint(rev: str) -> None:
    with pytest.raises(UsageError) as info:
        check_revision(rev)
    assert "model.revision" in info.value.message
    assert info.value.hint and "40-character" in info.value.hint


def test_no_revision_is_refused() -> None:
    with pytest.raises(UsageError, match="exact commit"):
        check_revision(None)


def test_the_recipe_schema_refuses_a_branch_located(tmp_path: Path) -> None:
    model = "  repo: acme/tiny-chat\n  revision: main\n"
    path, text = tiny_with_model(model, tmp_path)
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, str(path))
    line = text.splitlines().index("  revision: main") + 1
    assert info.value.location is not None
    assert info.value.location.line == line
    assert "not a commit hash" in info.value.message


def test_a_local_folder_recipe_has_nothing_to_pull_located(tmp_path: Path) -> None:
    text = embedded_recipes()["local-tiny"]
    path = tmp_path / "tiny.yaml"
    path.write_text(text)
    recipe = load_recipe_text(text, str(path))
    with pytest.raises(RecipeError) as info:
        repo_of(recipe, path)
    assert info.value.location is not None
    assert (
        info.value.location.line == text.splitlines().index("  path: models/tiny-deepseek-v3") + 1
    )
    assert info.value.location.field == "model.path"
    assert "nothing to pull" in info.value.message


def test_a_repo_recipe_gives_its_repo(tmp_path: Path) -> None:
    model = f"  repo: acme/tiny-chat\n  revision: {COMMIT}\n"
    path, text = tiny_with_model(model, tmp_path)
    assert repo_of(load_recipe_text(text, str(path)), path) == "acme/tiny-chat"


# --------------------------------------------------------------------------- digests


def lfs_entry() -> RepoFile:
    return RepoFile(
        path="model-00001-of-00002.safetensors",
        size=5,
        oid="b" * 40,
        lfs={"size": 5, "oid": SHA.upper(), "pointerSize": 134},
        type="file",
    )


def test_an_lfs_file_is_checked_by_sha256_and_its_blob_named_by_it() -> None:
    f = RemoteFile.from_entry(lfs_entry())
    assert f.digest == Digest("sha256", SHA)
    assert f.blob_name == SHA


def test_a_git_file_is_checked_by_its_blob_sha1() -> None:
    f = RemoteFile.from_entry(RepoFile(path="config.json", size=2, oid="C" * 40, type="file"))
    assert f.sha256 is None
    assert f.digest == Digest("git-sha1", "c" * 40)
    assert f.blob_name == "c" * 40


@pytest.mark.parametrize("data", [b"", b"{}", b"x" * 100_000, bytes(range(256)) * 999])
def test_digests_match_huggingface_hub_and_git(data: bytes) -> None:
    chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    assert digest_of(chunks, "git-sha1", len(data)).hex == git_hash(data)
    assert digest_of(chunks, "sha256", len(data)).hex == sha_fileobj(io.BytesIO(data)).hex()


def test_git_blob_sha1_of_a_known_file() -> None:
    # `printf 'hello\n' | git hash-object --stdin`
    assert digest_of([b"hello\n"], "git-sha1", 6).hex == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_file_digest_reads_the_file(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"abc" * 10_000_000)
    assert (
        file_digest(p, "sha256", 30_000_000).hex == hashlib.sha256(b"abc" * 10_000_000).hexdigest()
    )


# --------------------------------------------------------------------------- paths


def test_cache_paths_follow_huggingface_hub() -> None:
    paths = CachePaths.of("/var/lib/hf/", "acme/tiny-chat", COMMIT)
    folder = "/var/lib/hf/hub/" + repo_folder_name(repo_id="acme/tiny-chat", repo_type="model")
    assert paths.repo_folder == folder
    assert paths.pointer("sub/x.json") == f"{folder}/snapshots/{COMMIT}/sub/x.json"
    assert paths.blob(SHA) == f"{folder}/blobs/{SHA}"
    assert paths.is_blob(f"{folder}/blobs/{SHA}")
    assert not paths.is_blob(f"{folder}/blobs")
    assert not paths.is_blob(f"{folder}/snapshots/{SHA}")
    assert not paths.is_blob("/elsewhere/blobs/" + SHA)


@pytest.mark.parametrize(
    ("path", "ok"),
    [("config.json", True), ("a/b.bin", True), ("../x", False), ("/etc/x", False), ("", False)],
)
def test_repo_paths_stay_in_the_snapshot(path: str, ok: bool) -> None:
    assert safe_repo_path(path) is ok


def test_needed_bytes_counts_each_missing_blob_once() -> None:
    a = RemoteFile("a.bin", 10, "1" * 40, sha256="a" * 64)
    a2 = RemoteFile("copy/a.bin", 10, "1" * 40, sha256="a" * 64)
    b = RemoteFile("b.json", 3, "2" * 40)
    assert needed_bytes([a, a2, b], set()) == 13
    assert needed_bytes([a, a2, b], {"a" * 64}) == 3


# --------------------------------------------------------------------------- cache folder


def test_a_cache_that_cannot_be_created_says_how_to_fix_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(PullError) as info:
        writable_hub(blocker / "cache", from_flag=False)
    assert "runtime.hf_cache" in info.value.message
    assert info.value.hint and "--cache DIR" in info.value.hint


def test_a_writable_cache_gets_its_hub_folder(tmp_path: Path) -> None:
    assert writable_hub(tmp_path / "c", from_flag=True) == tmp_path / "c" / "hub"
    assert (tmp_path / "c" / "hub").is_dir()


def test_a_full_disk_is_refused_before_the_first_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = CachePaths.of(str(tmp_path), "acme/x", COMMIT)
    files = [RemoteFile("w.safetensors", 150 * 10**9, "1" * 40, sha256=SHA)]
    usage = pull_mod.shutil.disk_usage(tmp_path)._replace(free=10**9)
    monkeypatch.setattr(pull_mod.shutil, "disk_usage", lambda _: usage)
    with pytest.raises(PullError) as info:
        check_space(tmp_path, paths, files)
    assert "still to download" in info.value.message
    assert info.value.hint and "--cache DIR" in info.value.hint


# --------------------------------------------------------------------------- removal


def cached_file(tmp_path: Path, name: str) -> tuple[CachePaths, str, str]:
    paths = CachePaths.of(str(tmp_path), "acme/x", COMMIT)
    blob, pointer = paths.blob(name), paths.pointer("w.safetensors")
    os.makedirs(os.path.dirname(blob))
    os.makedirs(os.path.dirname(pointer))
    Path(blob).write_bytes(b"bad")
    os.symlink(os.path.relpath(blob, os.path.dirname(pointer)), pointer)
    return paths, blob, pointer


def test_a_bad_file_this_pull_made_is_removed(tmp_path: Path) -> None:
    paths, blob, pointer = cached_file(tmp_path, SHA)
    removed, command = remove_bad(paths, pointer, had_pointer=False, had_blob=False)
    assert removed == [blob, pointer]
    assert command is None
    assert not os.path.lexists(blob) and not os.path.lexists(pointer)


def test_a_bad_file_found_in_the_cache_is_only_reported(tmp_path: Path) -> None:
    paths, blob, pointer = cached_file(tmp_path, SHA)
    removed, command = remove_bad(paths, pointer, had_pointer=True, had_blob=True)
    assert removed == []
    assert command == f"rm -- '{blob}' '{pointer}'"
    assert os.path.exists(blob) and os.path.lexists(pointer)


def test_a_new_link_to_an_old_blob_removes_the_link_only(tmp_path: Path) -> None:
    paths, blob, pointer = cached_file(tmp_path, SHA)
    removed, command = remove_bad(paths, pointer, had_pointer=False, had_blob=True)
    assert removed == [pointer]
    assert command == f"rm -- '{blob}'"
    assert os.path.exists(blob)


def test_a_link_out_of_the_blobs_folder_is_never_followed(tmp_path: Path) -> None:
    paths = CachePaths.of(str(tmp_path), "acme/x", COMMIT)
    outside = tmp_path / "precious"
    outside.write_bytes(b"keep")
    pointer = paths.pointer("w.safetensors")
    os.makedirs(os.path.dirname(pointer))
    os.symlink(outside, pointer)
    removed, _ = remove_bad(paths, pointer, had_pointer=False, had_blob=False)
    assert removed == [pointer]
    assert outside.read_bytes() == b"keep"


# --------------------------------------------------------------------------- progress


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def start(self, path: str, total: int | None, done: int) -> None:
        self.events.append(("start", path, str(total), str(done)))

    def advance(self, path: str, n: int) -> None:
        self.events.append(("advance", path, str(n)))

    def finish(self, path: str, status: str) -> None:
        self.events.append(("finish", path, status))

    def note(self, text: str) -> None:
        self.events.append(("note", text))


def test_the_progress_adapter_forwards_and_stops() -> None:
    sink, stop = Recorder(), threading.Event()
    bar_cls = pull_mod._bar_class("w.bin", sink, stop)
    with bar_cls(total=10, initial=4, desc="w.bin", unit="B", unit_scale=True) as bar:
        bar.update(3)
        bar.update_transfer(3)
        bar.set_postfix_str("1 MB/s", refresh=False)
        stop.set()
        with pytest.raises(pull_mod._Stopped):
            bar.update(1)
    assert sink.events == [("start", "w.bin", "10", "4"), ("advance", "w.bin", "3")]


def test_the_result_never_holds_the_token() -> None:
    result = PullResult(
        repo="acme/x",
        revision=COMMIT,
        snapshot="/c/hub/models--acme--x/snapshots/" + COMMIT,
        endpoint="https://huggingface.co",
        xet=None,
        xet_note="hf_xet is not installed",
        token=True,
        files=[],
        downloaded_bytes=0,
        retries=0,
    )
    data = result.to_dict()
    assert data["token"] is True
    assert data["ok"] is True


def test_spec_defaults() -> None:
    spec = PullSpec("acme/x", COMMIT, Path("/c"))
    assert spec.include == () and spec.exclude == () and spec.workers >= 1

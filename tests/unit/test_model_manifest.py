from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from deskside.errors import UsageError
from deskside.models.manifest import load_manifest, manifest_of, write_manifest

from .model_cache import REPO, REVISION, flip_byte, make_entry

FILES = {"config.json": b"{}", "model-00001.safetensors": b"x" * 5000, "sub/tok.json": b"t"}


def test_a_snapshot_manifest_follows_links_into_its_blobs(tmp_path: Path) -> None:
    snap = make_entry(tmp_path, FILES)
    data, hashed = manifest_of(snap)
    assert data["repo"] == REPO and data["revision"] == REVISION and data["format"] == 1
    assert hashed == 3
    got = {f["path"]: f for f in data["files"]}
    assert set(got) == set(FILES)
    for path, content in FILES.items():
        sha = hashlib.sha256(content).hexdigest()
        assert got[path] == {"path": path, "size": len(content), "sha256": sha, "blob": sha}


def test_unchanged_files_come_from_the_record_and_a_written_one_is_hashed(tmp_path: Path) -> None:
    snap = make_entry(tmp_path, FILES)
    manifest_of(snap)
    assert manifest_of(snap)[1] == 0
    blob = os.path.realpath(snap / "model-00001.safetensors")
    flip_byte(Path(blob))  # size and mtime kept: the ctime tells
    data, hashed = manifest_of(snap)
    assert hashed == 1
    entry = next(f for f in data["files"] if f["path"] == "model-00001.safetensors")
    assert entry["sha256"] != hashlib.sha256(FILES["model-00001.safetensors"]).hexdigest()


def test_a_link_out_of_the_cache_entry_is_refused_by_name(tmp_path: Path) -> None:
    snap = make_entry(tmp_path, FILES)
    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(b"foreign")
    os.symlink(outside, snap / "extra.bin")
    with pytest.raises(UsageError) as exc:
        manifest_of(snap)
    assert "extra.bin" in exc.value.message and str(outside) in exc.value.message


def test_only_blobs_count_inside_the_entry(tmp_path: Path) -> None:
    snap = make_entry(tmp_path, FILES)
    other = make_entry(tmp_path, {"a.bin": b"a"}, revision="f" * 40)
    os.symlink(os.path.relpath(other / "a.bin", snap), snap / "a.bin")  # ends in blobs/
    assert "a.bin" in [f["path"] for f in manifest_of(snap)[0]["files"]]
    os.symlink("../../refs/main", snap / "ref.txt")  # in the entry, not in blobs/
    with pytest.raises(UsageError, match=r"ref\.txt"):
        manifest_of(snap)


def test_a_plain_folder_refuses_links_out_of_it(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "inside.json").symlink_to("config.json")
    data, _ = manifest_of(folder)
    assert [f["path"] for f in data["files"]] == ["config.json", "inside.json"]
    assert "repo" not in data
    (folder / "out.bin").symlink_to(tmp_path / "x")
    (tmp_path / "x").write_bytes(b"x")
    with pytest.raises(UsageError, match=r"out\.bin"):
        manifest_of(folder)


def test_written_manifest_loads_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    snap = make_entry(tmp_path, FILES)
    data, _ = manifest_of(snap)
    out = tmp_path / "m.json"
    write_manifest(data, out)
    assert load_manifest(out) == data
    out.write_text(json.dumps({"format": 1, "files": [{"path": "../x", "size": 1}]}))
    with pytest.raises(UsageError, match="entry 0"):
        load_manifest(out)


def _bad_manifest(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "m.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "deep":
        path.write_text("[" * 200_000 + "]" * 200_000)
    elif kind == "huge":
        with path.open("wb") as f:
            f.truncate(3 << 30)  # sparse
    return path


@pytest.mark.parametrize("kind", ["fifo", "zero", "deep", "huge"])
def test_a_manifest_that_is_no_file_or_no_manifest_is_refused_at_once(
    tmp_path: Path, kind: str
) -> None:
    import time

    t0 = time.monotonic()
    with pytest.raises(UsageError, match="not a manifest"):
        load_manifest(_bad_manifest(tmp_path, kind))
    assert time.monotonic() - t0 < 5


def test_the_snapshot_record_is_read_and_written_only_as_a_plain_file(tmp_path: Path) -> None:
    """A FIFO, link or huge file where the record goes is no record (never a hang), and a
    link put in place of the record's folder is not written through."""
    from deskside.models.node_files import RECORD_DIR, read_record, record_path, write_record

    entry = tmp_path / "entry"
    entry.mkdir()
    path = record_path(str(entry), REVISION)
    os.makedirs(os.path.dirname(path))
    os.mkfifo(path)
    assert read_record(path) == {}
    os.unlink(path)
    os.symlink("/dev/zero", path)
    assert read_record(path) == {}
    os.unlink(path)
    os.rmdir(os.path.dirname(path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (entry / RECORD_DIR).symlink_to(elsewhere)
    key = (1, 2, 3, 4)
    assert write_record(path, {"a": (key, "0" * 64)}) is False
    assert list(elsewhere.iterdir()) == []


def test_a_loop_of_links_in_a_model_folder_is_reported_not_a_crash(tmp_path: Path) -> None:
    from deskside.models.node_files import scan

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "a").symlink_to(folder / "b")
    (folder / "b").symlink_to(folder / "a")
    found = scan(str(folder), None)
    assert [f.path for f in found.files] == ["config.json"]
    assert {rel for rel, _ in found.dangling} == {"a", "b"}

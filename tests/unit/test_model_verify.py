from __future__ import annotations

import os
from pathlib import Path

from deskside.models.manifest import manifest_of
from deskside.models.verify import compare, verify

from .model_cache import flip_byte, make_entry

FILES = {"config.json": b"{}", "w.safetensors": b"w" * 4096}


def test_compare_names_differing_missing_and_extra_files() -> None:
    expected = [
        {"path": "a", "size": 1, "sha256": "1" * 64},
        {"path": "b", "size": 2, "sha256": "2" * 64},
        {"path": "c", "size": 3, "sha256": "3" * 64},
    ]
    found = {"a": (1, "1" * 64), "b": (2, "f" * 64), "d": (4, "4" * 64)}
    got = [(d.path, d.kind) for d in compare(expected, found)]
    assert got == [("b", "differs"), ("c", "missing"), ("d", "extra")]


def test_a_flipped_byte_with_size_and_mtime_kept_is_found(tmp_path: Path) -> None:
    snap = make_entry(tmp_path / "a", FILES)
    manifest, _ = manifest_of(snap)
    assert verify(snap, manifest).ok
    flip_byte(Path(os.path.realpath(snap / "w.safetensors")), 100)
    report = verify(snap, manifest)
    assert [(d.path, d.kind) for d in report.differences] == [("w.safetensors", "differs")]
    assert report.hashed == 2 and not report.quick


def test_quick_trusts_the_record_and_says_so(tmp_path: Path) -> None:
    snap = make_entry(tmp_path / "a", FILES)
    manifest, _ = manifest_of(snap)
    report = verify(snap, manifest, quick=True)
    assert report.ok and report.quick and report.hashed == 0
    (snap / "config.json").unlink()
    report = verify(snap, manifest, quick=True)
    assert [(d.path, d.kind) for d in report.differences] == [("config.json", "missing")]


def test_foreign_and_dangling_links_are_named(tmp_path: Path) -> None:
    snap = make_entry(tmp_path / "a", FILES)
    manifest, _ = manifest_of(snap)
    (tmp_path / "evil").write_bytes(b"{}")
    (snap / "config.json").unlink()
    (snap / "config.json").symlink_to(tmp_path / "evil")
    (snap / "gone.bin").symlink_to("../../blobs/nothing")
    kinds = {(d.path, d.kind) for d in verify(snap, manifest).differences}
    assert kinds == {("config.json", "foreign link"), ("gone.bin", "dangling link")}

"""Shared memory known by (device, inode): the scan, the judgment and the guarded removal,
run for real on a folder standing in for /dev/shm, with live holders."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deskside.facts.base import FactError, gather
from deskside.facts.shm import ShmScan, parse_shm, remove_argv, shm
from deskside.records.run import RunNode, RunRecord
from deskside.runtime.nodes import clean_shm
from deskside.transport.local import LocalTransport

HOLD = """
import mmap, sys, time
f = open(sys.argv[1], "rb")
g = open(sys.argv[2], "r+b")
m = mmap.mmap(g.fileno(), 4096)
g.close()
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, dict[str, Path]]]:
    folder = tmp_path / "shm"
    folder.mkdir()
    names = {
        "orphan": "psm_orphan",
        "open": "psm_held open",  # a space: a path match would miss it
        "mapped": "vllm\nmapped",  # a line break too
        "before": "torch_before",
        "linked": "psm_linked",
    }
    paths = {k: folder / v for k, v in names.items()}
    for p in paths.values():
        p.write_bytes(b"x" * 4096)
    os.link(paths["linked"], tmp_path / "second-name")  # a foreign file's second link
    (folder / "psm_link").symlink_to(paths["orphan"])
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(paths["open"]), str(paths["mapped"])],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield folder, paths
    finally:
        proc.kill()
        proc.wait()


def _scan(folder: Path) -> ShmScan:
    fact = shm(str(folder))
    got = gather(LocalTransport(), fact).result(fact)
    assert isinstance(got, ShmScan), got
    return got


def test_holders_are_found_by_inode_whatever_the_path_or_name(
    holder: tuple[Path, dict[str, Path]],
) -> None:
    folder, paths = holder
    scan = _scan(folder)
    by_name = {e.name: e for e in scan.entries}
    assert set(by_name) == {p.name for p in paths.values()} | {"psm_link"}
    assert scan.held(by_name["psm_held open"]) and scan.held(by_name["vllm\nmapped"])
    assert not scan.held(by_name["psm_orphan"])
    assert not by_name["psm_linked"].plain  # two links: someone else's too
    assert by_name["psm_link"].kind == "l" and not by_name["psm_link"].plain


def _run_before(entries: list[str], names: list[str]) -> RunRecord:
    node = RunNode(
        name="n0", role="head", node_rank=0, address="127.0.0.1", ssh=None, recipe_dir="/x"
    )
    return RunRecord(
        recipe="r.yaml",
        recipe_name="r",
        runtime="local",
        control="process",
        runtime_kind="native",
        unit="deskside-r.service",
        compose_project="deskside-r",
        api_url="http://127.0.0.1:8000",
        proxy_url=None,
        served_names=["m"],
        started_at="2026-01-01T00:00:00+00:00",
        nodes=[node],
        shm_before=names,
        shm_inodes=entries,
    )


def test_down_removes_only_what_the_run_left_and_nothing_holds(
    holder: tuple[Path, dict[str, Path]],
) -> None:
    folder, paths = holder
    before = next(e for e in _scan(folder).entries if e.name == "torch_before")
    run = _run_before([f"{before.dev}:{before.ino}"], ["torch_before"])
    removed = clean_shm(LocalTransport(), run, str(folder))
    assert removed == ["psm_orphan"]
    assert not paths["orphan"].exists()
    for kept in ("open", "mapped", "before", "linked"):
        assert paths[kept].exists(), kept


def test_the_removal_checks_again_on_the_node(holder: tuple[Path, dict[str, Path]]) -> None:
    """A segment replaced after the scan (another inode under the name) or held since is
    left alone, said so, exit 3."""
    folder, paths = holder
    scan = _scan(folder)
    orphan = next(e for e in scan.entries if e.name == "psm_orphan")
    held = next(e for e in scan.entries if e.name == "psm_held open")
    (folder / "new").write_bytes(b"y" * 4096)  # made while the old one lives: a new inode
    os.replace(folder / "new", paths["orphan"])  # another file under the old name
    r = LocalTransport().run(remove_argv([orphan, held], str(folder)))
    assert r.rc == 3
    assert "another file now" in r.stderr and "in use now" in r.stderr
    assert paths["orphan"].exists() and paths["open"].exists()


@pytest.mark.parametrize(
    "text", ["E f 1 2 3\0", "Q 1 2\0", "H x 2\0", "M 00 5\0", "E f 1 2 one 8 n\0"]
)
def test_answers_it_never_prints_are_refused(text: str) -> None:
    with pytest.raises(FactError):
        parse_shm(text)

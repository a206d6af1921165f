"""`deskside.facts.memory` and `deskside.facts.cgroup`: meminfo on recorded and hostile
text, the fact for real on this machine, and the memory cgroup's parsers and readers on
recorded v1 and v2 trees (tests/unit/fixtures/cgroup: v1 files recorded on a cgroup v1
host, v2 files in the kernel's format), read through a Transport's `get`."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deskside.facts.base import Unread, gather
from deskside.facts.cgroup import (
    CgroupMemory,
    layout_of,
    parse_limit,
    parse_proc_cgroup,
    parse_stat_value,
    read_one,
    read_scope,
    scope_folder,
)
from deskside.facts.memory import (
    Available,
    MemInfo,
    meminfo,
    parse_meminfo,
    read_available,
    read_meminfo,
)
from deskside.transport.fake import FakeTransport
from deskside.transport.local import LocalTransport

from .exporter_cases import PROC, meminfo_kb

CGROUP = Path(__file__).parent / "fixtures" / "cgroup"
LOCAL = LocalTransport()
MIB = 1 << 20
GIB = 1 << 30

# -- meminfo


def test_meminfo_of_a_recorded_gb10() -> None:
    got = parse_meminfo((PROC / "gb10-head" / "meminfo").read_text())
    assert got is not None
    assert got.total_bytes == meminfo_kb("gb10-head", "MemTotal") * 1024
    assert got.available_bytes == meminfo_kb("gb10-head", "MemAvailable") * 1024
    assert got.swap_total_bytes == meminfo_kb("gb10-head", "SwapTotal") * 1024
    assert got.used_bytes == got.total_bytes - got.available_bytes


@pytest.mark.parametrize(
    "text",
    [
        "",
        "MemTotal: 100 kB\n",  # cut short
        "MemTotal: lots kB\nMemAvailable: 1 kB\n",
        "MemTotal: " + "9" * 50 + " kB\nMemAvailable: 1 kB\n",  # absurd
        "\x00\xff" * 1000,
    ],
)
def test_meminfo_without_the_two_lines_is_none(text: str) -> None:
    assert parse_meminfo(text) is None


def test_the_first_line_of_a_key_wins() -> None:
    got = parse_meminfo("MemTotal: 2 kB\nMemAvailable: 1 kB\nMemAvailable: 999 kB\n")
    assert got == MemInfo(2048, 1024)


@given(st.text(max_size=500))
def test_any_text_is_read_or_none(text: str) -> None:
    got = parse_meminfo(text)
    assert got is None or got.total_bytes >= 0


def test_the_fact_and_the_reader_agree_on_this_machine() -> None:
    fact = meminfo()
    read = gather(LOCAL, fact).get(fact)
    direct = read_meminfo(LOCAL)
    assert direct is not None and read.total_bytes == direct.total_bytes
    assert read.total_bytes == int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    assert read_meminfo(LOCAL, str(PROC / "gb10-head")) == parse_meminfo(
        (PROC / "gb10-head" / "meminfo").read_text()
    )
    assert read_meminfo(LOCAL, "/nonexistent") is None
    gone = meminfo("/nonexistent")
    unread = gather(LOCAL, gone).result(gone)
    assert isinstance(unread, Unread) and unread.reason == "exited with status 1"


# -- cgroup parsers


def test_limits_of_both_layouts() -> None:
    assert parse_limit("9223372036854771712\n", "v1") is None  # unlimited, 4 KiB pages
    assert parse_limit("9223372036854710272\n", "v1") is None  # unlimited, 64 KiB pages
    assert parse_limit("629145600\n", "v1") == 600 * MIB
    assert parse_limit("max\n", "v2") is None
    assert parse_limit("2147483648\n", "v2") == 2 * GIB
    assert parse_limit("junk", "v2") is None
    assert parse_limit("9" * 100, "v2") is None


def test_stat_value_takes_the_first_key_present() -> None:
    text = (CGROUP / "v1/sys/fs/cgroup/memory/machine.slice/node0/memory.stat").read_text()
    assert parse_stat_value(text, ("total_inactive_file", "inactive_file")) == 151228416
    assert parse_stat_value("inactive_file 7\n", ("total_inactive_file", "inactive_file")) == 7
    assert parse_stat_value("", ("inactive_file",)) == 0


def test_proc_cgroup_paths() -> None:
    v1 = parse_proc_cgroup((CGROUP / "v1/proc/self/cgroup").read_text())
    assert v1 == {"v1": "/machine.slice/node0", "v2": "/"}
    assert parse_proc_cgroup("0::/machine.slice/node0\n") == {"v2": "/machine.slice/node0"}
    assert parse_proc_cgroup("5:cpu,memory:/a\nbad line\n") == {"v1": "/a"}


def test_headroom_is_the_limit_less_the_working_set() -> None:
    m = CgroupMemory("x", "v2", limit=1000, usage=800, inactive_file=300)
    assert m.working_set == 500 and m.headroom == 500
    assert CgroupMemory("x", "v1", 1000, 1200, 0).headroom == 0


# -- cgroup readers on recorded trees


@pytest.mark.parametrize(
    ("layout", "limit", "usage", "inactive"),
    [
        ("v1", 1073741824, 858993459, 104857600),
        ("v2", 2147483648, 1900000000, 200000000),
    ],
)
def test_the_tightest_ancestor_limit_applies(
    layout: str, limit: int, usage: int, inactive: int
) -> None:
    root = CGROUP / layout
    folder = scope_folder(LOCAL, str(root / "sys"), str(root / "proc"))
    assert folder is not None and Path(folder).name == "node0"
    assert read_one(LOCAL, folder, "v1" if layout == "v1" else "v2") is None  # no limit
    found = read_scope(LOCAL, folder)
    assert found is not None
    assert found.path == str(Path(folder).parent) and found.layout == layout
    assert (found.limit, found.usage, found.inactive_file) == (limit, usage, inactive)
    assert found.headroom == limit - (usage - inactive)


def test_no_limit_no_cgroup_reading(tmp_path: Path) -> None:
    root = CGROUP / "v1/sys/fs/cgroup/memory"
    assert read_scope(LOCAL, str(root)) is None  # the root: unlimited
    assert read_scope(LOCAL, str(tmp_path)) is None  # not a cgroup folder
    assert layout_of(LOCAL, str(tmp_path)) is None
    assert scope_folder(LOCAL, str(tmp_path), str(tmp_path)) is None


def test_a_remote_tree_reads_the_same_through_its_transport() -> None:
    """Only `get` is used: a node's files read through any Transport."""
    base = CGROUP / "v2"
    node = FakeTransport()
    for f in base.rglob("*"):
        if f.is_file():
            node.files["/" + str(f.relative_to(base))] = f.read_bytes()
    folder = scope_folder(node, "/sys", "/proc")
    assert folder == "/sys/fs/cgroup/machine.slice/node0"
    found = read_scope(node, folder)
    assert found is not None and found.path == "/sys/fs/cgroup/machine.slice"
    assert not [c for c in node.calls if c[0] == "run"]  # no process started


# -- what is available


def test_available_is_the_smaller_of_meminfo_and_the_cgroup() -> None:
    cg = CgroupMemory("/sys/fs/cgroup/memory/machine.slice", "v1", GIB, GIB // 2, 0)
    assert Available(8 * GIB, cg).available == GIB // 2
    assert Available(8 * GIB, cg).source.startswith("memory cgroup /sys/fs/cgroup/memory/machine")
    assert Available(GIB // 4, cg).available == GIB // 4
    assert Available(GIB // 4, cg).source == "MemAvailable"
    assert Available(None, cg).available == GIB // 2
    assert Available(None, None).available is None


def test_read_available_on_recorded_trees() -> None:
    root = CGROUP / "v2"
    leaf = str(root / "sys/fs/cgroup/machine.slice/node0")
    got = read_available(LOCAL, str(PROC / "gb10-head"), leaf)
    mem = meminfo_kb("gb10-head", "MemAvailable") * 1024
    assert got.mem_available == mem
    assert got.available == min(mem, 2147483648 - (1900000000 - 200000000))
    assert read_available(LOCAL, str(PROC / "gb10-head"), None).available == mem

"""The sysfs reader over the GB10 fixture trees, a remote-style dump of them, and `ip -j`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from deskside.fabric.probe import parse_ip_addr_json
from deskside.fabric.sysfs import (
    DirSource,
    SysfsError,
    parse_rate_gbps,
    read_snapshot,
    read_value,
)
from deskside.fabric.sysfs_dump import DumpSource, dump_command, parse_dump

FIXTURES = Path(__file__).parent / "fixtures" / "sysfs"
CASES = ["gb10-head", "gb10-worker", "no-v2", "two-matches", "port-down", "empty-files"]


def source(case: str) -> DirSource:
    return DirSource(FIXTURES / case / "sys")


def test_gb10_head_devices_ports_and_gid_table() -> None:
    snap = read_snapshot(
        source("gb10-head"),
        parse_ip_addr_json((FIXTURES / "gb10-head" / "ip-addr.json").read_text()),
    )
    assert [d.name for d in snap.devices] == ["rocep1s0f0", "rocep1s0f1"]
    f0 = snap.device("rocep1s0f0")
    assert f0 is not None
    assert f0.netdevs == ("enp1s0f0np0",) and f0.netdev == "enp1s0f0np0"
    (port,) = f0.ports
    assert (port.port, port.state, port.state_name, port.active) == (1, "4: ACTIVE", "ACTIVE", True)
    assert port.rate == "200 Gb/sec (4X HDR)" and port.rate_gbps == 200.0
    assert port.link_layer == "Ethernet"
    # 16 slots in the fixture, 8 populated: the all-zero ones are skipped.
    assert [g.index for g in port.gids] == list(range(8))
    assert [g.gid_type for g in port.gids] == ["IB/RoCE v1", "RoCE v2"] * 4
    assert {g.ndev for g in port.gids} == {"enp1s0f0np0"}
    assert port.gids[0].address == "fe80::5e25:73ff:fe2a:10c0" and port.gids[0].ipv4 is None
    assert port.gids[7].gid == "0000:0000:0000:0000:0000:ffff:c0a8:6401"
    assert port.gids[7].address == "::ffff:192.168.100.1"
    assert port.gids[7].ipv4 == "192.168.100.1"
    assert port.gids[4].address == "fd00:100::1"
    nd = snap.netdevs["enp1s0f0np0"]
    assert (nd.exists, nd.mtu, nd.operstate, nd.speed_mbps) == (True, 9000, "up", 200000)
    assert nd.ipv4 == ("192.168.100.1/24", "169.254.21.7/16")
    assert snap.netdevs["enp1s0f1np1"].ipv4 == ("192.168.101.1/24",)


def test_worker_down_port_and_unknown_speed() -> None:
    snap = read_snapshot(source("gb10-worker"))
    f1 = snap.device("rocep1s0f1")
    assert f1 is not None
    assert f1.ports[0].state_name == "DOWN" and not f1.ports[0].active
    assert f1.ports[0].rate_gbps == 40.0
    nd = snap.netdevs["enp1s0f1np1"]
    assert nd.operstate == "down" and nd.speed_mbps is None  # sysfs says -1
    assert nd.ipv4 is None  # no ip facts given: unknown, not empty
    f0 = snap.device("rocep1s0f0")
    assert f0 is not None and [g.index for g in f0.ports[0].gids] == [0, 1, 2, 3]


def test_empty_files_read_as_empty_not_missing() -> None:
    src = source("empty-files")
    base = "class/infiniband/rocep1s0f0/ports/1"
    assert read_value(src, f"{base}/rate") == ""
    assert read_value(src, f"{base}/gids/0") == ""
    assert read_value(src, f"{base}/nope") is None
    snap = read_snapshot(src)
    f0 = snap.device("rocep1s0f0")
    assert f0 is not None
    port = f0.ports[0]
    assert port.rate_gbps is None
    by_index = {g.index: g for g in port.gids}
    assert by_index[0].gid == "" and by_index[0].address is None  # kept, never a match
    assert by_index[6].ndev is None and by_index[7].gid_type is None
    f1 = snap.device("rocep1s0f1")
    assert f1 is not None and f1.ports[0].state == "" and f1.ports[0].state_name is None


def test_read_value_trims_like_posix_read(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("  RoCE v2\t \nsecond line\n")
    (tmp_path / "b").write_text("no newline")
    src = DirSource(tmp_path)
    assert read_value(src, "a") == "RoCE v2"
    assert read_value(src, "b") == "no newline"
    assert read_value(src, "missing") is None
    assert read_value(src, ".") is None  # a directory is unreadable, not empty


def test_missing_root_reads_as_no_devices(tmp_path: Path) -> None:
    snap = read_snapshot(DirSource(tmp_path / "nothing"))
    assert snap.devices == () and snap.netdevs == {}


@pytest.mark.parametrize("case", CASES)
def test_remote_dump_reads_the_same_as_the_tree(case: str) -> None:
    """The sh dump a node prints, parsed back, gives the snapshot the directory gives."""
    argv = dump_command(str(FIXTURES / case / "sys"))
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    dumped = read_snapshot(parse_dump(done.stdout, origin="x"))
    direct = read_snapshot(source(case))
    assert dumped.devices == direct.devices
    assert dumped.netdevs == direct.netdevs
    # Unused slots are not shipped: a real port has 256 of them.
    assert "0000:0000:0000:0000:0000:0000:0000:0000" not in done.stdout


def test_dump_source_lists_directories() -> None:
    src = DumpSource(
        files={"class/net/eth0/mtu": "1500", "class/infiniband/d/ports/1/state": "4: ACTIVE"},
        dirs=frozenset({"class/infiniband/d/device/net/eth0"}),
    )
    assert src.listdir("class/infiniband") == ["d"]
    assert src.listdir("class/infiniband/d/device/net") == ["eth0"]
    assert src.listdir("class/net/eth0") == ["mtu"]
    assert src.read("class/net/eth0/mtu") == "1500"
    assert src.read("class/net/eth1/mtu") is None


def test_parse_ip_addr_json() -> None:
    text = json.dumps(
        [
            {
                "ifname": "fpa",
                "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
                "mtu": 9000,
                "operstate": "UP",
                "addr_info": [
                    {"family": "inet", "local": "10.99.7.1", "prefixlen": 24},
                    {"family": "inet6", "local": "fe80::1", "prefixlen": 64},
                ],
            },
            {
                "ifname": "lo",
                "flags": ["LOOPBACK", "UP", "LOWER_UP"],
                "mtu": 65536,
                "operstate": "UNKNOWN",
                "addr_info": [],
            },
            {"ifname": "down0", "flags": ["NO-CARRIER", "UP"], "mtu": 1500, "operstate": "DOWN"},
            {"not": "an interface"},
        ]
    )
    got = parse_ip_addr_json(text)
    assert set(got) == {"fpa", "lo", "down0"}
    assert got["fpa"].ipv4 == ("10.99.7.1/24",) and got["fpa"].mtu == 9000
    assert got["fpa"].up and got["fpa"].has_address("10.99.7.1")
    assert not got["fpa"].has_address("10.99.7.10")
    assert got["lo"].up  # UNKNOWN with LOWER_UP
    assert not got["down0"].up


@pytest.mark.parametrize("bad", ["{", '{"a": 1}'])
def test_parse_ip_addr_json_refuses_garbage(bad: str) -> None:
    with pytest.raises(SysfsError):
        parse_ip_addr_json(bad)


@pytest.mark.parametrize(
    ("rate", "gbps"),
    [
        ("200 Gb/sec (4X HDR)", 200.0),
        ("100 Gb/sec (2X HDR)", 100.0),
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("", None),
        (None, None),
        ("fast", None),
    ],
)
def test_parse_rate(rate: str | None, gbps: float | None) -> None:
    assert parse_rate_gbps(rate) == gbps


def test_fixture_generator_is_in_sync(tmp_path: Path) -> None:
    """The checked-in trees are what make_fixtures.py writes (regenerate after edits)."""
    import importlib.util
    import shutil

    copy = tmp_path / "sysfs"
    shutil.copytree(FIXTURES, copy)
    spec = importlib.util.spec_from_file_location("make_fixtures", copy / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()

    def tree(root: Path) -> dict[str, str]:
        return {
            str(p.relative_to(root)): p.read_text()
            for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts
        }

    assert tree(copy) == tree(FIXTURES)

"""`check_fabric` gates over scripted transports (FakeTransport), and the CLI faces of
`deskside fabric show|check` through the real console entry point."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deskside.fabric.check import check_fabric
from deskside.fabric.report import CheckOptions
from deskside.fabric.sysfs_dump import dump_command
from deskside.recipe.load import load_recipe, load_recipe_text
from deskside.recipe.types import Recipe
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport

from ..cli_process import deskside

ROOT = Path(__file__).parents[2]
FIXTURES = Path(__file__).parent / "fixtures" / "sysfs"
FLAGSHIP = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"
LOCAL = ROOT / "recipes" / "local-tiny.yaml"
MIB = 2**20

PING_OK = "3 packets transmitted, 3 received, 0% packet loss, time 400ms\n"
PING_LOST = "3 packets transmitted, 0 received, 100% packet loss, time 2004ms\n"


@dataclass
class Node:
    """What a scripted node answers."""

    interface: str
    address: str
    mtu: int = 9000
    up: bool = True
    speed_mbps: str = "10000"
    rank_seconds: float | None = 0.1  # None: the rank fails
    sysfs_case: str | None = None
    ip_json: str | None = None
    perftest: bool = False
    peers_mtu: dict[str, int] = field(default_factory=dict)  # peer address -> its MTU

    def answer(self, argv: Sequence[str]) -> Result:
        a = list(argv)
        if a[:3] == ["ip", "-j", "addr"]:
            if self.ip_json is not None:
                return Result(0, self.ip_json, "")
            link = {
                "ifname": self.interface,
                "flags": ["UP", "LOWER_UP"] if self.up else ["NO-CARRIER", "UP"],
                "mtu": self.mtu,
                "operstate": "UP" if self.up else "DOWN",
                "addr_info": [{"family": "inet", "local": self.address, "prefixlen": 24}],
            }
            return Result(0, json.dumps([link]), "")
        if a[0] == "cat" and a[1].endswith("/speed"):
            return Result(0, self.speed_mbps + "\n", "")
        if a[0] == "ping":
            size = int(a[a.index("-s") + 1]) + 28
            dest = a[-1]
            if size > self.peers_mtu.get(dest, 9000):
                return Result(1, PING_LOST, "")
            return Result(0, PING_OK, "")
        if a[:2] == ["sh", "-c"] and a[2].startswith("root="):
            assert self.sysfs_case is not None
            real = dump_command(str(FIXTURES / self.sysfs_case / "sys"))
            done = subprocess.run(real, capture_output=True, text=True, check=True)
            return Result(0, done.stdout, "")
        if a[:2] == ["sh", "-c"] and "ib_write_bw" in a[2]:
            return Result(0 if self.perftest else 1, "", "")
        if a[0] == "ib_write_bw":
            return Result(0, " 65536  1000  0.00  180.50  0.34\n", "")
        if "-c" in a and "--backend" in a:
            rank = int(a[a.index("--rank") + 1])
            if self.rank_seconds is None:
                out = {"rank": rank, "ok": False, "error": "RuntimeError: Connection refused"}
                return Result(1, json.dumps(out) + "\n", "")
            size = int(a[a.index("--size-bytes") + 1])
            out = {
                "rank": rank,
                "ok": True,
                "correct": True,
                "size_bytes": size,
                "iterations": int(a[a.index("--iterations") + 1]),
                "seconds_per_iteration": self.rank_seconds,
            }
            return Result(0, json.dumps(out) + "\n", "")
        return Result(127, "", f"unexpected command {a[:3]}")


def fakes(nodes: dict[str, Node]) -> dict[str, FakeTransport]:
    for node in nodes.values():
        node.peers_mtu = {n.address: n.mtu for n in nodes.values()}
    return {name: FakeTransport(label=name, default=node.answer) for name, node in nodes.items()}


def local_nodes(**changes: dict[str, Any]) -> dict[str, Node]:
    nodes = {
        "node0": Node("ds-veth0", "10.77.0.1"),
        "node1": Node("ds-veth1", "10.77.0.2"),
    }
    for name, attrs in changes.items():
        for key, value in attrs.items():
            setattr(nodes[name], key, value)
    return nodes


def gates(report: Any) -> dict[tuple[str, str | None, str | None], str]:
    return {(g.gate, g.node, g.peer): g.status for g in report.gates}


def test_all_gates_pass_on_matching_mtu() -> None:
    recipe = load_recipe(LOCAL)
    report = check_fabric(recipe, fakes(local_nodes()), CheckOptions(python="python3"))
    assert report.ok
    assert gates(report) == {
        ("link", "node0", None): "pass",
        ("address", "node0", None): "pass",
        ("link", "node1", None): "pass",
        ("address", "node1", None): "pass",
        ("mtu", None, None): "pass",
        ("ping", "node0", "node1"): "pass",
        ("ping", "node1", "node0"): "pass",
        ("allreduce", None, None): "pass",
    }
    ar = report.allreduce
    assert ar is not None
    assert (ar.backend, ar.world_size, ar.master) == ("gloo", 2, "10.77.0.1:25000")
    assert ar.busbw_gbps == pytest.approx(64 * MIB * 8 / 0.1 / 1e9)
    assert ar.link_gbps == 10.0 and ar.min_fraction == 0.10
    assert ar.fraction_of_link == pytest.approx(0.5369, abs=1e-3)
    assert report.ib_write_bw == ()


def test_rank_processes_get_the_rendezvous_and_socket_interface() -> None:
    recipe = load_recipe(LOCAL)
    transports = fakes(local_nodes())
    check_fabric(recipe, transports, CheckOptions(python="py", port=29999, size_bytes=MIB))
    for name, iface, rank in (("node0", "ds-veth0", "0"), ("node1", "ds-veth1", "1")):
        (call,) = [c for c in transports[name].calls if "--backend" in c[1]]
        _, argv, env = call
        assert argv[0] == "py" and env == {
            "GLOO_SOCKET_IFNAME": iface,
            "NCCL_SOCKET_IFNAME": iface,
        }
        assert argv[argv.index("--rank") + 1] == rank
        assert argv[argv.index("--master-addr") + 1] == "10.77.0.1"
        assert argv[argv.index("--master-port") + 1] == "29999"
        assert argv[argv.index("--size-bytes") + 1] == str(MIB)


def test_mtu_gate_fails_when_one_side_is_lowered() -> None:
    recipe = load_recipe(LOCAL)
    report = check_fabric(recipe, fakes(local_nodes(node1={"mtu": 1500})))
    g = gates(report)
    assert not report.ok
    assert g[("mtu", None, None)] == "fail"
    assert g[("ping", "node0", "node1")] == "fail"  # 9000-byte frames dropped by node1
    assert g[("ping", "node1", "node0")] == "pass"  # node1 pings at its own 1500
    mtu = next(x for x in report.gates if x.gate == "mtu")
    assert "node0 9000, node1 1500" in mtu.message


def test_equal_but_small_mtu_warns_and_recipe_mtu_is_enforced() -> None:
    recipe = load_recipe(LOCAL)
    small = check_fabric(recipe, fakes(local_nodes(node0={"mtu": 1500}, node1={"mtu": 1500})))
    assert small.ok and gates(small)[("mtu", None, None)] == "warn"
    text = LOCAL.read_text().replace("transport: socket", "transport: socket\n    mtu: 9000", 1)
    pinned = load_recipe_text(text, str(LOCAL))
    report = check_fabric(pinned, fakes(local_nodes(node0={"mtu": 1500}, node1={"mtu": 1500})))
    assert not report.ok and gates(report)[("mtu", None, None)] == "fail"


def test_link_down_skips_the_bandwidth_probe() -> None:
    recipe = load_recipe(LOCAL)
    report = check_fabric(recipe, fakes(local_nodes(node1={"up": False})))
    g = gates(report)
    assert g[("link", "node1", None)] == "fail" and g[("allreduce", None, None)] == "skip"
    assert report.allreduce is None and not report.ok


def test_failed_rank_and_slow_link_fail_the_gate() -> None:
    recipe = load_recipe(LOCAL)
    dead = check_fabric(recipe, fakes(local_nodes(node1={"rank_seconds": None})))
    ar_gate = next(x for x in dead.gates if x.gate == "allreduce")
    assert (
        ar_gate.status == "fail" and "rank 1: RuntimeError: Connection refused" in ar_gate.message
    )
    assert "rendezvous at 10.77.0.1:25000" in ar_gate.message
    slow = check_fabric(recipe, fakes(local_nodes(node0={"rank_seconds": 2.0})))
    ar_gate = next(x for x in slow.gates if x.gate == "allreduce")
    assert ar_gate.status == "fail" and "below the 10% pass threshold" in ar_gate.message
    # The slowest rank sets the time.
    assert slow.allreduce is not None and slow.allreduce.seconds_per_iteration == 2.0
    lenient = check_fabric(
        recipe, fakes(local_nodes(node0={"rank_seconds": 2.0})), CheckOptions(min_fraction=0.01)
    )
    assert lenient.ok


def test_unknown_link_rate_is_not_gated_unless_asked() -> None:
    recipe = load_recipe(LOCAL)
    nodes = local_nodes(node0={"speed_mbps": "-1"})
    report = check_fabric(recipe, fakes(nodes))
    ar_gate = next(x for x in report.gates if x.gate == "allreduce")
    assert ar_gate.status == "pass" and "not gated" in ar_gate.message
    strict = check_fabric(
        recipe, fakes(local_nodes(node0={"speed_mbps": "-1"})), CheckOptions(min_busbw_gbps=100.0)
    )
    assert not strict.ok


def flagship(hcas: str = "[rocep1s0f0]") -> Recipe:
    text = FLAGSHIP.read_text().replace("hcas: [rocep1s0f0]", f"hcas: {hcas}")
    return load_recipe_text(text, str(FLAGSHIP))


def spark_nodes(perftest: bool = True) -> dict[str, Node]:
    return {
        "ai1": Node(
            "enp1s0f0np0",
            "192.168.100.1",
            speed_mbps="200000",
            sysfs_case="gb10-head",
            ip_json=(FIXTURES / "gb10-head" / "ip-addr.json").read_text(),
            perftest=perftest,
        ),
        "ai2": Node(
            "enp1s0f0np0",
            "192.168.100.2",
            speed_mbps="200000",
            sysfs_case="gb10-worker",
            ip_json=(FIXTURES / "gb10-worker" / "ip-addr.json").read_text(),
            perftest=perftest,
        ),
    }


def test_roce_resolves_per_node_and_feeds_nccl() -> None:
    recipe = flagship()
    transports = fakes(spark_nodes())
    report = check_fabric(recipe, transports, CheckOptions(python="python3"))
    g = gates(report)
    assert g[("rdma", "ai1", None)] == "pass" and g[("rdma", "ai2", None)] == "pass"
    assert [n.rdma.gid_index for n in report.nodes if n.rdma] == [7, 3]
    assert report.allreduce is not None and report.allreduce.backend == "nccl"
    assert report.allreduce.link_gbps == 200.0  # the RDMA port rate, not the netdev's
    assert report.allreduce.min_fraction == 0.75
    for name, index in (("ai1", "7"), ("ai2", "3")):
        (call,) = [c for c in transports[name].calls if "--backend" in c[1]]
        env = call[2]
        assert env["NCCL_IB_GID_INDEX"] == index and env["NCCL_NET"] == "IB"
        assert env["NCCL_IB_HCA"] == "=rocep1s0f0"
    (ib,) = report.ib_write_bw
    assert (ib.server, ib.client, ib.bw_gbps, ib.link_gbps) == ("ai2", "ai1", 180.5, 200.0)
    assert g[("ib_write_bw", "ai1", "ai2")] == "pass"
    server = next(c[1] for c in transports["ai2"].calls if c[1][0] == "ib_write_bw")
    client = next(c[1] for c in transports["ai1"].calls if c[1][0] == "ib_write_bw")
    assert server[server.index("-x") + 1] == "3" and client[client.index("-x") + 1] == "7"
    assert client[-1] == "192.168.100.2"


def test_roce_listing_an_unaddressed_device_fails_closed() -> None:
    """Listing both ConnectX-7 devices when only rocep1s0f0
    carries the fabric address, so both nodes fail the rdma gate and NCCL is not tried."""
    report = check_fabric(flagship("[rocep1s0f0, rocep1s0f1]"), fakes(spark_nodes()))
    g = gates(report)
    assert g[("rdma", "ai1", None)] == "fail" and g[("rdma", "ai2", None)] == "fail"
    assert g[("allreduce", None, None)] == "skip" and g[("ib_write_bw", None, None)] == "skip"
    assert not report.ok


def test_roce_without_perftest_skips_ib_write_bw() -> None:
    report = check_fabric(flagship(), fakes(spark_nodes(perftest=False)))
    ib = next(x for x in report.gates if x.gate == "ib_write_bw")
    assert ib.status == "skip" and "not installed on ai1, ai2" in ib.message


def test_report_json_shape() -> None:
    report = check_fabric(load_recipe(LOCAL), fakes(local_nodes()))
    data = json.loads(report.model_dump_json())
    assert set(data) == {
        "recipe",
        "transport",
        "ok",
        "nodes",
        "gates",
        "allreduce",
        "ib_write_bw",
        "seconds",
    }
    assert set(data["gates"][0]) == {"gate", "status", "node", "peer", "message", "data"}
    assert {"name", "interface", "address", "mtu", "up", "speed_gbps", "rdma"} <= set(
        data["nodes"][0]
    )
    assert {"busbw_gbps", "link_gbps", "fraction_of_link", "min_fraction"} <= set(data["allreduce"])


# --------------------------------------------------------------------------- CLI


@pytest.mark.parametrize(
    ("case", "address", "indexes"),
    [("gb10-head", "192.168.100.1", [7, None]), ("gb10-worker", "192.168.100.2", [3, None])],
)
def test_cli_show_snapshot_json(case: str, address: str, indexes: list[int | None]) -> None:
    done = deskside(
        "fabric",
        "show",
        "--sysfs-root",
        str(FIXTURES / case / "sys"),
        "--address",
        address,
        "--ip-addr",
        str(FIXTURES / case / "ip-addr.json"),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["address"] == address
    ports = data["ports"]
    assert [p["gid_index"] for p in ports] == indexes
    for p in ports:
        assert {"device", "port", "state", "netdev", "gid_index", "error"} <= set(p)
    assert ports[0]["error"] is None and ports[0]["netdev"] == "enp1s0f0np0"
    assert ports[1]["error"]["kind"] in ("not_found", "port_down")
    assert ports[1]["error"]["message"] and ports[1]["error"]["hint"]


def test_cli_show_table_and_usage_errors() -> None:
    done = deskside(
        "fabric",
        "show",
        "--sysfs-root",
        str(FIXTURES / "two-matches" / "sys"),
        "--address",
        "192.168.100.1",
    )
    assert done.returncode == 0
    assert "ambiguous" in done.stdout and "indexes 7, 9" in done.stdout
    bad = deskside(
        "fabric", "show", "--sysfs-root", str(FIXTURES), "--address", "fe80::1", "--json"
    )
    assert bad.returncode == 2 and json.loads(bad.stdout)["error"] == "UsageError"
    nodir = deskside("fabric", "show", "--sysfs-root", "/nonexistent/sys")
    assert nodir.returncode == 2 and "no such directory" in nodir.stderr


def test_cli_check_refuses_bad_flags() -> None:
    bad = deskside("fabric", "check", str(LOCAL), "--netns", "node0")
    assert bad.returncode == 2 and "NODE=NAMESPACE" in bad.stderr
    unknown = deskside("fabric", "check", str(LOCAL), "--netns", "nodeX=ns")
    assert unknown.returncode == 2 and "unknown node" in unknown.stderr
    backend = deskside("fabric", "check", str(LOCAL), "--backend", "mpi")
    assert backend.returncode == 2


def test_fake_transport_contract_is_what_check_uses() -> None:
    """check_fabric only needs run(); a transport answering 127 everywhere fails cleanly."""
    recipe = load_recipe(LOCAL)

    def broken(argv: Sequence[str]) -> Result:
        return Result(127, "", "not found")

    report = check_fabric(
        recipe, {n: FakeTransport(label=n, default=broken) for n in ("node0", "node1")}
    )
    assert not report.ok
    link = next(g for g in report.gates if g.gate == "link")
    assert "ip -j addr show" in link.message

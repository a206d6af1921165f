"""`deskside fabric check` for real between two network-namespace hosts joined by a veth
pair (issue 5 acceptance): links, MTU, don't-fragment pings at 9000 bytes and a gloo
all-reduce pass at matching MTU; lowering one side's MTU fails the gate (exit 1).

Needs root and iproute2 (scripts/system-deps installs it). Everything is created under
names unique to this run and deleted in the fixture's finalizer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..cli_process import deskside

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]


@dataclass(frozen=True)
class Hosts:
    ns: tuple[str, str]
    ifaces: tuple[str, str]
    addrs: tuple[str, str]
    recipe: Path  # nodes mapped with --netns
    recipe_netns: Path  # nodes carrying `netns:` in the recipe itself


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def set_mtu(hosts: Hosts, side: int, mtu: int) -> None:
    ip("-n", hosts.ns[side], "link", "set", hosts.ifaces[side], "mtu", str(mtu))


def wait_carrier(hosts: Hosts, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for ns, iface in zip(hosts.ns, hosts.ifaces, strict=True):
            out = subprocess.run(
                ["ip", "-n", ns, "-j", "link", "show", "dev", iface],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            states.append(json.loads(out)[0].get("operstate"))
        if states == ["UP", "UP"]:
            return
        time.sleep(0.1)
    raise AssertionError(f"veth pair did not come up: {states}")


RECIPE = """\
version: 1
name: fabric-netns
cluster:
  nodes:
    - name: node0
      address: {a0}
      role: head
      hardware: cpu
{netns0}      fabric: {{interface: {i0}, address: {a0}}}
    - name: node1
      address: {a1}
      role: worker
      hardware: cpu
{netns1}      fabric: {{interface: {i1}, address: {a1}}}
  fabric:
    transport: socket
    mtu: 9000
    master_port: 29500
model:
  path: ./model
  served_name: tiny
engine:
  vllm_version: "0.32.0"
  device: cpu
  tensor_parallel_size: 2
  nnodes: 2
  kv_cache_memory: 1GiB
  max_model_len: 4096
  load_format: dummy
runtime:
  kind: native
"""


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (network namespaces)")
    tag = f"{os.getpid() % 100000:05d}"
    ns = (f"dsf{tag}a", f"dsf{tag}b")
    ifaces = (f"dsf{tag}a0", f"dsf{tag}b0")
    net = 1 + os.getpid() % 250
    addrs = (f"10.99.{net}.1", f"10.99.{net}.2")
    tmp = tmp_path_factory.mktemp("fabric")
    recipe = tmp / "recipe.yaml"
    recipe.write_text(
        RECIPE.format(a0=addrs[0], a1=addrs[1], i0=ifaces[0], i1=ifaces[1], netns0="", netns1="")
    )
    recipe_netns = tmp / "recipe-netns.yaml"
    recipe_netns.write_text(
        RECIPE.format(
            a0=addrs[0],
            a1=addrs[1],
            i0=ifaces[0],
            i1=ifaces[1],
            netns0=f"      netns: {ns[0]}\n",
            netns1=f"      netns: {ns[1]}\n",
        )
    )
    h = Hosts(ns=ns, ifaces=ifaces, addrs=addrs, recipe=recipe, recipe_netns=recipe_netns)
    try:
        for name in ns:  # a leftover of a killed run with the same pid would block `add`
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
            ip("netns", "add", name)
        # Created directly inside the namespaces: nothing appears in the root namespace.
        ip("link", "add", ifaces[0], "netns", ns[0], "type", "veth", "peer", "name", ifaces[1],
           "netns", ns[1])  # fmt: skip
        for side in (0, 1):
            ip("-n", ns[side], "addr", "add", f"{addrs[side]}/24", "dev", ifaces[side])
            ip("-n", ns[side], "link", "set", ifaces[side], "mtu", "9000", "up")
            ip("-n", ns[side], "link", "set", "lo", "up")
        wait_carrier(h)
        yield h
    finally:
        for name in ns:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not any(name in left for name in ns), left


def netns_flags(h: Hosts) -> list[str]:
    return ["--netns", f"node0={h.ns[0]}", "--netns", f"node1={h.ns[1]}"]


def test_check_passes_at_matching_mtu(hosts: Hosts) -> None:
    done = deskside("fabric", "check", str(hosts.recipe), *netns_flags(hosts), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is True
    status = {(g["gate"], g["node"], g["peer"]): g["status"] for g in report["gates"]}
    assert status == {
        ("link", "node0", None): "pass",
        ("address", "node0", None): "pass",
        ("link", "node1", None): "pass",
        ("address", "node1", None): "pass",
        ("mtu", None, None): "pass",
        ("ping", "node0", "node1"): "pass",
        ("ping", "node1", "node0"): "pass",
        ("allreduce", None, None): "pass",
    }
    pings = [g for g in report["gates"] if g["gate"] == "ping"]
    assert all(g["data"]["received"] == 3 for g in pings)
    assert all("-s 8972" in g["message"] for g in pings)  # 9000-byte frames, DF set
    assert [n["mtu"] for n in report["nodes"]] == [9000, 9000]
    ar = report["allreduce"]
    assert ar["backend"] == "gloo" and ar["world_size"] == 2 and ar["correct"] is True
    assert ar["master"] == f"{hosts.addrs[0]}:29500"
    assert ar["busbw_gbps"] > 0 and ar["link_gbps"] == 10.0  # veth reports 10000 Mb/s
    print(
        f"\ngloo all-reduce over veth: {ar['size_bytes'] / 2**20:g} MiB, "
        f"{ar['seconds_per_iteration'] * 1e3:.1f} ms/iteration, busbw "
        f"{ar['busbw_gbps']:.2f} Gbit/s ({ar['fraction_of_link']:.0%} of {ar['link_gbps']:g})"
    )


def test_recipe_netns_field_and_table_output(hosts: Hosts) -> None:
    """Nodes that carry `netns:` in the recipe need no flags; the table says PASS."""
    done = deskside("fabric", "check", str(hosts.recipe_netns), "--size", "8MiB")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout and "allreduce" in done.stdout


def test_show_reads_each_namespace(hosts: Hosts) -> None:
    done = deskside("fabric", "show", str(hosts.recipe), *netns_flags(hosts), "--json")
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    assert [(n["name"], n["interface"], n["mtu"], n["operstate"]) for n in view["nodes"]] == [
        ("node0", hosts.ifaces[0], 9000, "UP"),
        ("node1", hosts.ifaces[1], 9000, "UP"),
    ]
    assert [n["ipv4"] for n in view["nodes"]] == [[f"{a}/24"] for a in hosts.addrs]
    assert all(n["ports"] == [] for n in view["nodes"])  # no RDMA on a veth


def test_mtu_gate_fails_when_one_side_is_lowered(hosts: Hosts) -> None:
    set_mtu(hosts, 1, 1500)
    try:
        done = deskside("fabric", "check", str(hosts.recipe), *netns_flags(hosts), "--json")
    finally:
        set_mtu(hosts, 1, 9000)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False
    gates = {(g["gate"], g["node"], g["peer"]): g for g in report["gates"]}
    mtu = gates[("mtu", None, None)]
    assert mtu["status"] == "fail" and mtu["data"]["mtus"] == {"node0": 9000, "node1": 1500}
    # node0's 9000-byte frames are dropped by node1; node1 pings fine at its own 1500.
    assert gates[("ping", "node0", "node1")]["status"] == "fail"
    assert gates[("ping", "node1", "node0")]["status"] == "pass"
    assert "-s 1472" in gates[("ping", "node1", "node0")]["message"]

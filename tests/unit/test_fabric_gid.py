"""GID selection (fail closed, never index 0 by accident) and drift, on the GB10 fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskside.fabric.gid import (
    GidSelectionError,
    gid_drift,
    ipv4_mapped_gid,
    recorded_gid_index,
    resolve_node,
    resolve_ports,
    select_gid,
    split_hca,
)
from deskside.fabric.sysfs import DirSource, SysfsSnapshot, read_snapshot
from deskside.fabric.sysfs_dump import DumpSource

FIXTURES = Path(__file__).parent / "fixtures" / "sysfs"
HEAD, WORKER = "192.168.100.1", "192.168.100.2"
F0 = "enp1s0f0np0"


def snap(case: str) -> SysfsSnapshot:
    return read_snapshot(DirSource(FIXTURES / case / "sys"))


def test_ipv4_mapped_gid_is_what_sysfs_writes() -> None:
    assert ipv4_mapped_gid("192.168.100.1") == "0000:0000:0000:0000:0000:ffff:c0a8:6401"
    assert ipv4_mapped_gid("10.0.0.255") == "0000:0000:0000:0000:0000:ffff:0a00:00ff"
    with pytest.raises(ValueError):
        ipv4_mapped_gid("fe80::1")


def test_split_hca() -> None:
    assert split_hca("rocep1s0f0") == ("rocep1s0f0", None)
    assert split_hca("mlx5_0:1") == ("mlx5_0", 1)


def test_head_is_7_and_worker_is_3() -> None:
    """The seed's numbers: the indexes differ per node, so neither can be hardcoded."""
    head = resolve_node(snap("gb10-head"), HEAD, ["rocep1s0f0"], F0)
    worker = resolve_node(snap("gb10-worker"), WORKER, ["rocep1s0f0"], F0)
    assert (head.ok, head.gid_index, head.error) == (True, 7, None)
    assert (worker.ok, worker.gid_index, worker.error) == (True, 3, None)
    assert head.ports[0].gid == "::ffff:192.168.100.1"
    assert head.expected_gid == "0000:0000:0000:0000:0000:ffff:c0a8:6401"


def test_port_syntax_selects_the_port() -> None:
    res = resolve_node(snap("gb10-worker"), WORKER, ["rocep1s0f0:1"], F0)
    assert res.gid_index == 3
    missing = resolve_node(snap("gb10-worker"), WORKER, ["rocep1s0f0:2"], F0)
    assert not missing.ok and missing.error is not None and missing.error["kind"] == "no_port"


def test_default_netdev_is_the_devices_own() -> None:
    (port,) = resolve_ports(snap("gb10-head"), HEAD, ["rocep1s0f0"])
    assert port.netdev == F0 and port.gid_index == 7


def test_the_other_rail_lists_what_it_found() -> None:
    """rocep1s0f1's netdev carries another address: it fails closed and shows the table."""
    ports = resolve_ports(snap("gb10-head"), HEAD, None)
    assert [(p.device, p.gid_index) for p in ports] == [("rocep1s0f0", 7), ("rocep1s0f1", None)]
    err = ports[1].error
    assert err is not None and err["kind"] == "not_found"
    assert "::ffff:192.168.101.1 RoCE v2 on enp1s0f1np1" in err["message"]
    assert [c["index"] for c in err["found"]] == [0, 1, 2, 3]
    assert err["found"][3] == {
        "index": 3,
        "gid": "0000:0000:0000:0000:0000:ffff:c0a8:6501",
        "address": "::ffff:192.168.101.1",
        "type": "RoCE v2",
        "ndev": "enp1s0f1np1",
    }


def test_listing_both_devices_fails_closed_for_the_node() -> None:
    """NCCL applies one GID index to every device in NCCL_IB_HCA: one bad device fails
    the node instead of letting NCCL use index 7 on a device where it means nothing."""
    res = resolve_node(snap("gb10-head"), HEAD, ["rocep1s0f0", "rocep1s0f1"], F0)
    assert not res.ok and res.gid_index is None
    assert res.error is not None
    assert "1 of 2 listed port(s) failed (rocep1s0f1:1)" in res.error["message"]
    assert "list only devices whose netdev carries the fabric address" in res.error["hint"]
    assert res.ports[0].gid_index == 7  # the good one is still shown


def test_down_port_on_the_worker_fails_closed() -> None:
    res = resolve_node(snap("gb10-worker"), WORKER, ["rocep1s0f0", "rocep1s0f1"], F0)
    assert not res.ok and res.error is not None and res.error["kind"] == "port_down"


@pytest.mark.parametrize(
    ("case", "kind", "needle", "hint"),
    [
        ("no-v2", "not_found", "[2] ::ffff:192.168.100.1 IB/RoCE v1", "RoCE v2"),
        ("two-matches", "ambiguous", "indexes 7, 9", "duplicate"),
        ("port-down", "port_down", "state: 1: DOWN", "cable"),
        ("empty-files", "not_found", "[7] ::ffff:192.168.100.1 type unreadable", "unreadable"),
    ],
)
def test_hostile_trees_fail_closed(case: str, kind: str, needle: str, hint: str) -> None:
    res = resolve_node(snap(case), HEAD, ["rocep1s0f0"], F0)
    assert not res.ok and res.gid_index is None
    assert res.error is not None
    assert res.error["kind"] == kind
    assert needle in res.error["message"]
    assert hint in res.error["hint"]
    (port,) = res.ports
    assert port.gid_index is None and port.error is not None
    assert port.error["error"] == "GidSelectionError"


def test_never_index_0_by_accident() -> None:
    """Index 0 of empty-files has an empty GID typed RoCE v2 on the right netdev: a reader
    that compared loosely, or defaulted an empty result, would answer 0."""
    res = resolve_node(snap("empty-files"), HEAD, ["rocep1s0f0"], F0)
    assert res.gid_index is None
    assert res.error is not None and res.error["found"] == []  # node-level: see ports
    found = res.ports[0].error["found"] if res.ports[0].error else []
    assert found[0]["index"] == 0 and found[0]["gid"] == ""


def test_unknown_device_and_empty_list() -> None:
    res = resolve_node(snap("gb10-head"), HEAD, ["mlx5_0"], F0)
    assert res.error is not None and res.error["kind"] == "no_device"
    assert "rocep1s0f0, rocep1s0f1" in res.error["message"]
    none = resolve_node(snap("gb10-head"), HEAD, [], F0)
    assert none.error is not None and none.error["kind"] == "no_hcas"


def _two_device_snapshot(index_a: int, index_b: int, ndev_b: str = F0) -> SysfsSnapshot:
    gid = ipv4_mapped_gid(HEAD)
    files: dict[str, str] = {}
    for dev, index, ndev in (("a", index_a, F0), ("b", index_b, ndev_b)):
        base = f"class/infiniband/{dev}/ports/1"
        files[f"{base}/state"] = "4: ACTIVE"
        files[f"{base}/gids/{index}"] = gid
        files[f"{base}/gid_attrs/types/{index}"] = "RoCE v2"
        files[f"{base}/gid_attrs/ndevs/{index}"] = ndev
    return read_snapshot(DumpSource(files=files))


def test_devices_that_disagree_fail_closed() -> None:
    agree = resolve_node(_two_device_snapshot(3, 3), HEAD, ["a", "b"], F0)
    assert agree.gid_index == 3
    disagree = resolve_node(_two_device_snapshot(3, 5), HEAD, ["a", "b"], F0)
    assert disagree.gid_index is None
    assert disagree.error is not None and disagree.error["kind"] == "disagree"
    assert "a:1 -> 3, b:1 -> 5" in disagree.error["message"]


def test_entry_on_another_netdev_is_not_a_match() -> None:
    s = _two_device_snapshot(3, 4, ndev_b="bond0")
    (port,) = resolve_ports(s, HEAD, ["b"], F0)
    assert port.gid_index is None and port.error is not None
    assert "is on netdev bond0, not enp1s0f0np0" in port.error["hint"]
    (same,) = resolve_ports(s, HEAD, ["b"], "bond0")
    assert same.gid_index == 4


def test_select_gid_without_netdev_refuses() -> None:
    dev = snap("gb10-head").device("rocep1s0f0")
    assert dev is not None
    with pytest.raises(GidSelectionError) as exc:
        select_gid(dev.ports[0], HEAD, None)
    assert exc.value.kind == "not_found"
    assert select_gid(dev.ports[0], HEAD, F0).index == 7


def test_error_to_dict_is_json_ready() -> None:
    dev = snap("two-matches").device("rocep1s0f0")
    assert dev is not None
    with pytest.raises(GidSelectionError) as exc:
        select_gid(dev.ports[0], HEAD, F0)
    data = exc.value.to_dict()
    assert data["error"] == "GidSelectionError" and data["kind"] == "ambiguous"
    assert data["device"] == "rocep1s0f0" and data["port"] == 1
    assert len(data["found"]) == 10  # type: ignore[arg-type]


# --------------------------------------------------------------------------- drift


def test_drift_statuses() -> None:
    head = resolve_node(snap("gb10-head"), HEAD, ["rocep1s0f0"], F0)
    assert gid_drift("7", head).status == "ok"
    assert gid_drift(7, head).ok
    moved = gid_drift("3", head)
    assert moved.status == "drift" and moved.current == 7 and moved.recorded == "3"
    assert "running with 3, sysfs now says 7" in moved.message
    assert moved.hint is not None and "restart" in moved.hint
    for empty in (None, "", "  "):
        unset = gid_drift(empty, head)
        assert unset.status == "unset" and "index 0" in unset.message
    assert gid_drift("seven", head).status == "invalid"
    gone = resolve_node(snap("port-down"), HEAD, ["rocep1s0f0"], F0)
    lost = gid_drift("7", gone)
    assert lost.status == "unresolvable" and lost.current is None
    assert "not ACTIVE" in lost.message


def test_recorded_gid_index_from_env() -> None:
    assert recorded_gid_index({"NCCL_IB_GID_INDEX": "7"}) == "7"
    assert recorded_gid_index({}) is None

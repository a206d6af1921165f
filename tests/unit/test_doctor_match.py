"""Nodes that must match (`deskside.doctor.match`): the parser on recorded outputs, the
comparison, the node script run for real on this machine, and the deploy's preflight
refusing on drift (fake hosts)."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deskside.doctor.match import (
    CLOCK_SKEW_LIMIT,
    NodeMatch,
    compare,
    measured,
    must_match,
    refusal,
)
from deskside.doctor.match_facts import MatchFacts, driver_version, match_command, parse_match
from deskside.errors import DesksideError
from deskside.recipe.types import Node
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport
from deskside.transport.local import LocalTransport

from .test_deploy_pipeline import Cluster

SHA_A = "ab12" + "0" * 60
SHA_B = "cd34" + "1" * 60
WHEEL = "/opt/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
IP_JSON = json.dumps(
    [
        {
            "ifname": "enP2p1s0f1np1",
            "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
            "mtu": 9000,
            "operstate": "UP",
            "addr_info": [{"family": "inet", "local": "192.168.100.10", "prefixlen": 24}],
        }
    ]
)

# what the script printed on a GB10 node (DGX OS 7), between other preflight facts
SPARK = f"""uid=0
python=3.12.3
match.clock=1767323045.123456789
match.kernel=6.11.0-1016-nvidia
match.python=3.12.3
match.vllm=0.32.0
match.deskside=1
match.deskside_version=0.1.0
match.nccl_wheel={WHEEL}
match.cuda=13.0
match.driver_proc=NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  \
Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Sep 25 20:25:46 UTC 2025
match.nccl={WHEEL}
match.nccl_file={WHEEL}
match.nccl_sha256={SHA_A}
match.ip={IP_JSON}
"""


def node(name: str = "spark-a", address: str = "192.168.100.10", iface: str | None = None) -> Node:
    data: dict[str, object] = {"name": name, "address": address, "role": "head"}
    data["hardware"] = "cpu"
    if iface:
        data["fabric"] = {"interface": iface, "address": address}
    return Node.model_validate(data)


def facts(**changes: object) -> MatchFacts:
    base = MatchFacts(
        kernel="6.11.0-1016-nvidia",
        driver="580.95.05",
        cuda="13.0",
        nccl=WHEEL,
        nccl_sha256=SHA_A,
        nccl_file=WHEEL,
        vllm="0.32.0",
        deskside="0.1.0",
        clock=1000.0,
        interface="enP2p1s0f1np1",
        mtu=9000,
        link_up=True,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def two(a: MatchFacts, b: MatchFacts) -> list[NodeMatch]:
    return [NodeMatch("spark-a", a, 0.0, 0.01), NodeMatch("spark-b", b, 0.0, 0.01)]


# --------------------------------------------------------------------------- parsing


def test_parse_a_recorded_spark() -> None:
    f = parse_match(SPARK, node())
    assert f == MatchFacts(
        kernel="6.11.0-1016-nvidia",
        driver="580.95.05",
        cuda="13.0",
        nccl=WHEEL,
        nccl_sha256=SHA_A,
        nccl_file=WHEEL,
        vllm="0.32.0",
        deskside="0.1.0",
        clock=1767323045.123456789,
        interface="enP2p1s0f1np1",  # the one carrying the node's address
        mtu=9000,
        link_up=True,
    )


def test_parse_absent_things_are_none_and_an_empty_output_is_unknown() -> None:
    bare = (
        "match.clock=1767323045.N\nmatch.kernel=6.8.0-49-generic\nmatch.python=3.12.3\n"
        "match.vllm=\nmatch.deskside=0\nmatch.nccl=none\nmatch.ip=\n"
    )
    f = parse_match(bare, node())
    assert (f.driver, f.cuda, f.nccl, f.nccl_sha256, f.vllm, f.deskside) == ("none",) * 6
    assert f.clock == 1767323045.0  # date(1) without %N
    assert f.mtu is None and f.link_up is None and f.interface is None
    assert parse_match("", node()) == MatchFacts()
    assert parse_match("uid=0\nvllm=0.32.0\n", node()) == MatchFacts()


def test_parse_falls_back_to_nvidia_smi_and_reads_a_down_interface() -> None:
    text = SPARK.replace("match.cuda=13.0\n", "").replace("match.driver_proc", "match.x")
    text += "match.smi_driver=580.95.05\nmatch.smi_cuda=13.0\n"
    text = text.replace('"UP", "LOWER_UP"]', '"UP"]').replace(
        '"operstate": "UP"', '"operstate": "DOWN"'
    )
    f = parse_match(text, node(iface="enP2p1s0f1np1"))
    assert (f.driver, f.cuda, f.link_up) == ("580.95.05", "13.0", False)


def test_driver_version_lines() -> None:
    assert (
        driver_version(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 2023"
        )
        == "535.129.03"
    )
    assert driver_version("NVRM version: nothing here") is None


# --------------------------------------------------------------------------- comparison


def test_identical_nodes_give_only_an_info_summary() -> None:
    found = compare(two(facts(), facts()))
    assert [f.severity for f in found] == ["info"]
    assert "NCCL library" in found[0].what and "vLLM 0.32.0" in found[0].what
    assert compare([NodeMatch("one", facts())]) == []


def test_a_different_nccl_build_is_a_problem_naming_both_files() -> None:
    found = compare(two(facts(), facts(nccl="/usr/lib/libnccl.so.2", nccl_sha256=SHA_B)))
    (drift,) = [f for f in found if f.kind == "drift"]
    assert drift.severity == "problem"
    assert drift.what.startswith("NCCL library differs: spark-a ")
    assert f"{WHEEL} sha256 {SHA_A}" in drift.what and f"sha256 {SHA_B}" in drift.what
    assert drift.detail["values"] == {"spark-a": SHA_A, "spark-b": SHA_B}
    # the same bytes at another path are the same build
    same = compare(two(facts(), facts(nccl="/elsewhere/libnccl.so.2", nccl_file=None)))
    assert [f.kind for f in same] == ["match"]


def test_none_equals_none_and_unknown_is_left_out() -> None:
    none = facts(driver="none", cuda="none", nccl="none", nccl_sha256="none")
    assert [f.kind for f in compare(two(none, none))] == ["match"]
    assert [f.kind for f in compare(two(facts(), facts(driver=None, mtu=None)))] == ["match"]
    found = compare(two(facts(), facts(nccl="none", nccl_sha256="none")))
    assert "spark-b none found" in found[0].what


def test_severities_per_key() -> None:
    found = compare(
        two(
            facts(),
            facts(driver="580.82.09", vllm="0.31.0", mtu=1500, kernel="6.11.1", deskside="0.2.0"),
        )
    )
    by_key = {f.detail["key"]: f.severity for f in found if f.kind == "drift"}
    assert by_key == {
        "driver": "problem",
        "vllm": "problem",
        "mtu": "problem",
        "kernel": "warning",
        "deskside": "warning",
    }


def test_clock_skew_beyond_the_limit_and_the_measurement_error() -> None:
    a, b = facts(), facts()
    far = [NodeMatch("spark-a", a, 5.0, 0.05), NodeMatch("spark-b", b, 5.0 + 2.0, 0.05)]
    (clock,) = [f for f in compare(far) if f.kind == "clock"]
    assert clock.severity == "problem" and "differ by 2.0 s" in clock.what
    # this machine's own clock being off moves both nodes alike: no finding
    near = [NodeMatch("spark-a", a, 30.0, 0.05), NodeMatch("spark-b", b, 30.4, 0.05)]
    assert not [f for f in compare(near) if f.kind == "clock"]
    # a slow round trip could explain the gap: no finding
    slow = [NodeMatch("spark-a", a, 0.0, 0.4), NodeMatch("spark-b", b, CLOCK_SKEW_LIMIT + 0.5, 0.4)]
    assert not [f for f in compare(slow) if f.kind == "clock"]


def test_measured_skew_is_against_the_midpoint() -> None:
    m = measured("n", facts(clock=110.0), sent=100.0, received=102.0)
    assert (m.skew, m.skew_error) == (9.0, 1.0)
    assert measured("n", facts(clock=None), 0, 1).skew is None


def test_a_fabric_interface_without_carrier_is_a_problem() -> None:
    found = compare(two(facts(), facts(link_up=False)))
    (down,) = [f for f in found if f.kind == "fabric"]
    assert down.node == "spark-b" and down.severity == "problem"


values = st.sampled_from(["none", "1", "2"])


@given(a=values, b=values, c=values)
def test_drift_exactly_when_values_differ(a: str, b: str, c: str) -> None:
    nodes = [
        NodeMatch(name, facts(driver=v, nccl_sha256=v))
        for name, v in (("x", a), ("y", b), ("z", c))
    ]
    found = compare(nodes)
    drifts = {f.detail["key"] for f in found if f.kind == "drift"}
    assert drifts == (set() if a == b == c else {"driver", "nccl"})
    reordered = {f.detail["key"] for f in compare(nodes[::-1]) if f.kind == "drift"}
    assert reordered == drifts


def test_refusal_keeps_problems_notes_warnings_and_points_at_doctor() -> None:
    found = compare(two(facts(), facts(kernel="6.12", driver="1.2")))
    problems, notes = refusal(found, Path("r.yaml"))
    assert [p.detail["key"] for p in problems] == ["driver"]
    assert "`deskside doctor r.yaml`" in (problems[0].fix or "")
    assert len(notes) == 1 and notes[0].startswith("kernel differs")


# --------------------------------------------------------------------------- the script


def test_the_script_finds_the_nccl_library_the_way_the_engine_would(tmp_path: Path) -> None:
    lib = tmp_path / "nccl-a" / "libnccl.so.2.27.7"
    lib.parent.mkdir()
    lib.write_bytes(b"nccl build A")
    (lib.parent / "libnccl.so.2").symlink_to(lib.name)
    want = hashlib.sha256(b"nccl build A").hexdigest()
    t = LocalTransport()
    n = node(address="127.0.0.1")

    def run(env: dict[str, str], python: str | None = sys.executable) -> MatchFacts:
        argv = match_command(python=python, engine_env=env, nccl=True, interface=None)
        r = t.run(argv, timeout=60)
        assert r.ok, r.stderr
        return parse_match(r.stdout, n)

    # VLLM_NCCL_SO_PATH names the file
    f = run({"VLLM_NCCL_SO_PATH": str(lib.parent / "libnccl.so.2")})
    assert (f.nccl, f.nccl_sha256, f.nccl_file) == (
        str(lib.parent / "libnccl.so.2"),
        want,
        str(lib),
    )
    # libnccl.so.2 through the engine's LD_LIBRARY_PATH
    f = run({"LD_LIBRARY_PATH": f"/nonexistent:{lib.parent}"})
    assert f.nccl == str(lib.parent / "libnccl.so.2") and f.nccl_sha256 == want
    # a path that is not there
    f = run({"VLLM_NCCL_SO_PATH": str(tmp_path / "gone.so")})
    assert f.nccl_sha256 == "missing"
    # this machine: the venv's vLLM and this kernel, loopback at 127.0.0.1
    f = run({"LD_LIBRARY_PATH": "/nonexistent"})
    assert f.kernel and f.vllm not in (None, "none") and f.interface == "lo"
    assert f.clock is not None and f.mtu is not None
    assert run({}, python=None).vllm is None  # no Python asked: unknown


def test_the_script_finds_the_nvidia_nccl_wheel(tmp_path: Path) -> None:
    lib = tmp_path / "site" / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"wheel build")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path / "site"} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    argv = match_command(python=str(wrapper), engine_env={}, nccl=True, interface=None)
    f = parse_match(LocalTransport().run(argv, timeout=60).stdout, node(address="127.0.0.1"))
    assert f.nccl == str(lib) and f.nccl_sha256 == hashlib.sha256(b"wheel build").hexdigest()


# --------------------------------------------------------------------------- must_match


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    yield tmp_path / "home"


def _answers(sha: str) -> FakeTransport:
    return FakeTransport(
        default=lambda argv: Result(0, SPARK.replace(SHA_A, sha).replace("spark-a", "x"), "")
    )


def test_must_match_reads_every_node_and_names_the_unreachable(tmp_path: Path, home: Path) -> None:
    c = Cluster(tmp_path)
    recipe, path, _ = c.recipe()
    found = must_match(recipe, path, {"node0": _answers(SHA_A), "node1": _answers(SHA_B)})
    (drift,) = [f for f in found if f.kind == "drift"]
    assert SHA_A in drift.what and SHA_B in drift.what
    # the engine's environment reached the script: VLLM_NCCL_SO_PATH is its third argument
    recipe, path, _ = c.recipe(engine__env={"VLLM_NCCL_SO_PATH": "/opt/nccl/libnccl.so.2"})
    t = _answers(SHA_A)

    def lost(argv: object) -> Result:
        raise DesksideError("cannot connect to 10.90.0.2:22")

    found = must_match(recipe, path, {"node0": t, "node1": FakeTransport(default=lost)})
    assert [(f.kind, f.node, f.severity) for f in found] == [("unreachable", "node1", "problem")]
    assert "cannot connect" in found[0].what
    assert t.calls[0][1][6] == "/opt/nccl/libnccl.so.2"


def test_deploy_preflight_refuses_on_drift_and_changes_nothing(tmp_path: Path, home: Path) -> None:
    c = Cluster(tmp_path)
    base = "uid=0\nexisting=/\nwritable=1\ndisk_free_kib=100000000\npython=3.11.7\nvllm=0.32.0\n"
    base += "deskside=1\nprogram=g++\n"
    c.head.facts = base + SPARK.replace("192.168.100.10", "10.90.0.1")
    c.worker.facts = base + SPARK.replace("192.168.100.10", "10.90.0.2").replace(SHA_A, SHA_B)
    report = c.deploy()
    assert not report.ok and report.failed_stage == "preflight"
    assert "node0, node1: NCCL library differs" in (report.error or "")
    assert SHA_A in (report.error or "") and SHA_B in (report.error or "")
    assert "deskside doctor" in (report.hint or "")
    assert not [e for e in c.journal.entries if e[1] in ("put", "spawn")]
    # the match script ran inside the facts round trip: one command per node
    facts_runs = [
        e for e in c.journal.entries if e[1] == "run" and "match.kernel" in " ".join(e[2])
    ]
    assert len(facts_runs) == 2
    # the same build on both: no refusal from the comparison
    c.worker.facts = c.head.facts.replace("10.90.0.1", "10.90.0.2")
    assert c.deploy().ok

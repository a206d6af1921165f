"""`deskside.facts.drift`: what must be the same on every node, compared (pure): each key's
severity, unknown values left out, the clock against the measurement's error, a fabric
interface without carrier, the refusal `up` gives; and the values taken from the facts."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from deskside.facts.base import Unread
from deskside.facts.clock import NodeClock
from deskside.facts.drift import (
    CLOCK_SKEW_LIMIT,
    NONE,
    NodeShared,
    Shared,
    compare,
    measured,
    refusal,
    refusal_text,
    shared,
)
from deskside.facts.network import parse_links
from deskside.facts.versions import parse_versions

from .test_facts_versions import SHA_A, SPARK, WHEEL

SHA_B = "cd34" + "1" * 60
IFACE = "enP2p1s0f1np1"
IP_JSON = json.dumps(
    [
        {
            "ifname": IFACE,
            "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
            "mtu": 9000,
            "operstate": "UP",
            "addr_info": [{"family": "inet", "local": "192.168.100.10", "prefixlen": 24}],
        }
    ]
)


def facts(**changes: object) -> Shared:
    base = Shared(
        kernel="6.11.0-1016-nvidia",
        driver="580.95.05",
        cuda="13.0",
        nccl=WHEEL,
        nccl_sha256=SHA_A,
        nccl_file=WHEEL,
        vllm="0.32.0",
        deskside="0.1.0",
        interface=IFACE,
        mtu=9000,
        link_up=True,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def two(a: Shared, b: Shared) -> list[NodeShared]:
    return [NodeShared("spark-a", a, 0.0, 0.01), NodeShared("spark-b", b, 0.0, 0.01)]


# --------------------------------------------------------------------------- values


def test_values_of_a_recorded_spark() -> None:
    got = shared(parse_versions(SPARK), parse_links(IP_JSON), IFACE)
    assert got == facts()


def test_absent_things_are_none_and_unread_facts_are_unknown() -> None:
    bare = parse_versions("kernel=6.8.0-49-generic\npython=3.12.3\nvllm=\ndeskside=0\nnccl=-\n")
    got = shared(bare, parse_links(""), None)
    assert (got.driver, got.cuda, got.nccl, got.nccl_sha256, got.vllm, got.deskside) == (
        (NONE,) * 6
    )
    assert got.mtu is None and got.link_up is None and got.interface is None
    assert shared(Unread("host_versions", "timed out"), Unread("links", "x"), IFACE) == Shared(
        interface=IFACE
    )
    # a Python that did not run: its vLLM is unknown, not absent
    broken = parse_versions("kernel=6.8\npython_missing=1\n")
    assert shared(broken, None, None).vllm is None
    unreadable = parse_versions("kernel=6.8\nnccl=/opt/l.so\nnccl_unreadable=1\n")
    assert shared(unreadable, None, None).nccl_sha256 == "missing"


def test_a_down_interface_is_read_as_such() -> None:
    down = IP_JSON.replace('"UP", "LOWER_UP"]', '"UP"]').replace(
        '"operstate": "UP"', '"operstate": "DOWN"'
    )
    got = shared(parse_versions(SPARK), parse_links(down), IFACE)
    assert (got.mtu, got.link_up) == (9000, False)


# --------------------------------------------------------------------------- comparison


def test_identical_nodes_give_only_an_info_summary() -> None:
    found = compare(two(facts(), facts()))
    assert [f.severity for f in found] == ["info"]
    assert "NCCL library" in found[0].what and "vLLM 0.32.0" in found[0].what
    assert compare([NodeShared("one", facts())]) == []


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
    far = [NodeShared("spark-a", a, 5.0, 0.05), NodeShared("spark-b", b, 5.0 + 2.0, 0.05, False)]
    (clock,) = [f for f in compare(far) if f.kind == "clock"]
    assert clock.severity == "problem" and "differ by 2.0 s" in clock.what
    assert clock.what.endswith("not synchronized: spark-b")
    # this machine's own clock being off moves both nodes alike: no finding
    near = [NodeShared("spark-a", a, 30.0, 0.05), NodeShared("spark-b", b, 30.4, 0.05)]
    assert not [f for f in compare(near) if f.kind == "clock"]
    # a slow round trip could explain the gap: no finding
    slow = [
        NodeShared("spark-a", a, 0.0, 0.4),
        NodeShared("spark-b", b, CLOCK_SKEW_LIMIT + 0.5, 0.4),
    ]
    assert not [f for f in compare(slow) if f.kind == "clock"]


def test_measured_skew_is_against_the_midpoint() -> None:
    m = measured("n", facts(), NodeClock(110.0, True), sent=100.0, received=102.0)
    assert (m.skew, m.skew_error, m.synced) == (9.0, 1.0, True)
    assert measured("n", facts(), Unread("clock", "no time"), 0, 1).skew is None
    assert measured("n", facts(), None, 0, 1).skew is None


def test_a_fabric_interface_without_carrier_is_a_problem() -> None:
    found = compare(two(facts(), facts(link_up=False)))
    (down,) = [f for f in found if f.kind == "fabric"]
    assert down.node == "spark-b" and down.severity == "problem"


values = st.sampled_from(["none", "1", "2"])


@given(a=values, b=values, c=values)
def test_drift_exactly_when_values_differ(a: str, b: str, c: str) -> None:
    nodes = [
        NodeShared(name, facts(driver=v, nccl_sha256=v))
        for name, v in (("x", a), ("y", b), ("z", c))
    ]
    found = compare(nodes)
    drifts = {f.detail["key"] for f in found if f.kind == "drift"}
    assert drifts == (set() if a == b == c else {"driver", "nccl"})
    reordered = {f.detail["key"] for f in compare(nodes[::-1]) if f.kind == "drift"}
    assert reordered == drifts


def test_refusal_keeps_problems_notes_warnings_and_says_where_to_look() -> None:
    found = compare(two(facts(), facts(kernel="6.12", driver="1.2")))
    problems, notes = refusal(found, "see the doctor")
    assert [p.detail["key"] for p in problems] == ["driver"]
    assert (problems[0].fix or "").endswith("; see the doctor")
    assert len(notes) == 1 and notes[0].startswith("kernel differs")
    message, hint = refusal_text(problems)
    assert message.startswith("the nodes differ in what they must share:\n  spark-a, spark-b")
    assert "NVIDIA driver differs" in message and hint == problems[0].fix

"""The doctor's other-stacks scan (Docker, systemd) and its disk, port and memory judges,
fed recorded outputs."""

from __future__ import annotations

from deskside.doctor.space import disk_finding, memory_finding, port_findings
from deskside.doctor.stacks import parse_scan, parse_size, stack_findings
from deskside.facts.disk import parse_held
from deskside.facts.model_folder import hf_cache_entry
from deskside.facts.network import parse_holders

CID = "0123456789ab" + "0" * 52
MON = "com.docker.compose.project=mon"
RECORDED = f"""docker 1
ps {{"ID":"{CID}","Image":"vllm/vllm-openai:v0.9","Names":"old-vllm","Labels":""}}
ps {{"ID":"{"f" * 64}","Image":"grafana/grafana","Names":"g","Labels":"{MON}"}}
ps {{"ID":"{"e" * 64}","Image":"x","Names":"mine","Labels":"com.docker.compose.project=deskside-r"}}
stats {{"ID":"0123456789ab","Name":"old-vllm","MemUsage":"7.5GiB / 119.7GiB"}}
stats {{"ID":"ffffffffffff","Name":"g","MemUsage":"80MiB / 119.7GiB"}}
systemd 1
unit ssh.service
unit vllm-old.service
unit deskside-other.service
unit deskside-r.service
unit deskside-r-proxy.service
"""


def test_sizes() -> None:
    assert parse_size("7.5GiB") == int(7.5 * 2**30)
    assert parse_size("12MB") == 12_000_000
    assert parse_size("0B") == 0 and parse_size("--") is None


def test_other_stacks_are_reported_and_this_recipes_are_not() -> None:
    scan = parse_scan(RECORDED)
    assert scan.docker and scan.systemd and len(scan.containers) == 3
    findings = stack_findings(scan, "ai1", "r", set(), set())
    by_what = {f.detail.get("id") or f.detail.get("unit"): f for f in findings}
    old = by_what["0123456789ab"]
    assert old.severity == "warning" and old.reclaimable_bytes == int(7.5 * 2**30)
    assert old.fix == "docker stop old-vllm"
    assert by_what["ffffffffffff"].severity == "info"  # small, not an engine
    assert by_what["ffffffffffff"].fix == "docker compose --project-name mon down"
    assert "eeeeeeeeeeee" not in by_what  # this recipe's project
    assert set(by_what) - {"0123456789ab", "ffffffffffff"} == {
        "vllm-old.service",
        "deskside-other.service",
    }
    # what the engine scan reported already is not reported twice
    again = stack_findings(scan, "ai1", "r", {"0123456789ab"}, {"vllm-old.service"})
    assert {f.detail.get("id") or f.detail.get("unit") for f in again} == {
        "ffffffffffff",
        "deskside-other.service",
    }


def test_docker_that_does_not_answer_is_said() -> None:
    findings = stack_findings(parse_scan("docker 0\n"), "ai1", "r", set(), set())
    assert [f.kind for f in findings] == ["docker"]


def test_ports() -> None:
    holders = parse_holders(
        'port 8888 LISTEN 0 4096 0.0.0.0:8888 0.0.0.0:* users:(("python3",pid=4100,fd=27))\n'
    )
    assert holders == {8888: "python3 pid 4100"}
    found = port_findings(
        "ai1", frozenset({8888, 22}), {8888: "engine.port", 4000: "proxy.port"}, holders, "on ai1"
    )
    assert [(f.kind, f.severity, f.detail["port"]) for f in found] == [
        ("port-taken", "problem", 8888)
    ]
    assert "python3 pid 4100" in found[0].what


def test_disk_and_memory() -> None:
    assert disk_finding("ai1", "/opt", 10, 5, "x") is None
    short = disk_finding("ai1", "/var/lib/hf", 1 << 30, 160 << 30, "the weights")
    assert short is not None and short.kind == "disk-short"
    assert parse_held("2048\n") == 2 << 20
    assert hf_cache_entry("/c/", "org/m") == "/c/hub/models--org--m"
    gib = 1 << 30
    assert memory_finding("ai1", 128 * gib, 100 * gib, 90 * gib, 0) is None
    covered = memory_finding("ai1", 128 * gib, gib, 10 * gib, 9 * gib)
    assert covered is not None and covered.severity == "warning"
    short_mem = memory_finding("ai1", 128 * gib, gib, 10 * gib, gib)
    assert short_mem is not None and short_mem.severity == "problem"

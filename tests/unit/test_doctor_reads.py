"""What `deskside doctor` reads on deployed nodes: each node's machine (processes, shared
memory, other stacks, meminfo) in one round trip and its ports and disk in another, judged
from the answers (fake nodes answering recorded outputs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskside.doctor.procs import GPU_APPS
from deskside.doctor.run import Doctor
from deskside.facts import disk, network
from deskside.facts.procs import PROCESSES
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport

from .fact_answers import answer_round_trip
from .proc_tables import table_text
from .test_deploy_pipeline import Cluster

GIB = 1 << 30


def node(available_kib: int) -> FakeTransport:
    """A node answering every fact of the doctor's round trips; nothing recorded there."""

    def fact(argv: list[str]) -> Result | None:
        script, args = argv[2], argv[4:]
        if script == 'exec "$@"':  # the shared memory and stack scans
            return Result(0, "", "")
        if script == PROCESSES.script:  # no process
            return Result(0, table_text([]), "")
        if script == GPU_APPS.script:
            return Result(0, "none\n", "")
        if script == 'exec cat -- "$1/meminfo"':
            return Result(0, f"MemTotal: 134217728 kB\nMemAvailable: {available_kib} kB\n", "")
        if script == network.LISTENING_SH:
            return Result(0, "00000000:22B8\n", "")  # the engine port 8888
        if script == network.HOLDERS_SH:
            line = 'LISTEN 0 4096 0.0.0.0:8888 0.0.0.0:* users:(("python3",pid=4100,fd=27))'
            return Result(0, "".join(f"port {p} {line}\n" for p in args if p == "8888"), "")
        if script == disk.SPACE_SH:
            rows = [f"{i} writable=1 free_kib=1024 existing=/" for i in range(len(args))]
            return Result(0, "\n".join(rows) + "\n", "")
        return None

    return FakeTransport(
        default=lambda argv: answer_round_trip(argv, fact) or Result(4, "", "no such file")
    )


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    return Cluster(tmp_path)


def test_each_node_is_read_in_two_round_trips_and_judged(cluster: Cluster) -> None:
    recipe, path, _ = cluster.recipe()
    nodes = {"node0": node(64 * 1024 * 1024), "node1": node(1024)}
    report = Doctor(recipe, path, nodes, here=FakeTransport()).run()
    for t in nodes.values():
        trips = [c for c in t.calls if c[0] == "run" and answer_round_trip(c[1], lambda a: None)]
        assert len(trips) == 2
    kinds = {(f.kind, f.node) for f in report.findings}
    assert ("port-taken", "node0") in kinds  # the head's engine port, and who holds it
    (taken,) = [f for f in report.findings if f.kind == "port-taken"]
    assert "python3 pid 4100" in taken.what
    assert ("disk-short", "node0") in kinds and ("disk-short", "node1") in kinds
    assert report.memory["node0"]["available_bytes"] == 64 * GIB
    assert report.memory["node1"]["total_bytes"] == 128 * GIB
    assert not [f for f in report.findings if f.kind in ("facts", "process-scan")]

"""The doctor's dead runs: deskside's state of an engine that no longer runs is found,
removed by --fix only while it is still dead, and a live engine's tag is spared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from deskside.doctor.run import Doctor
from deskside.doctor.runs import node_layout, own_runs
from deskside.home import resolve_recipe
from deskside.records.node import NodeState, write_state
from deskside.transport.local import LocalTransport

from ..monitor_stub import node_state


def _state(node: str, pid: int, start: int | None, tag: str | None) -> NodeState:
    return node_state("local-tiny", node, pid=pid, pid_start=start, run_tag=tag)


def test_dead_state_is_found_and_fixed_live_is_spared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    recipe, path = resolve_recipe("local-tiny", make_model=False)
    here = LocalTransport()
    n0, n1 = recipe.cluster.nodes
    live = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        start = int(Path(f"/proc/{live.pid}/stat").read_text().rpartition(")")[2].split()[19])
        # node0: a pid that is not the recorded process (wrong start time): dead
        write_state(
            here,
            node_layout(recipe, None, n0),
            _state("node0", live.pid, 1, "local-tiny/node0/20260101000000/engine"),
        )
        # node1: the live child itself, with no tag recorded
        write_state(here, node_layout(recipe, None, n1), _state("node1", live.pid, start, None))
        own = own_runs(recipe, {"node0": here, "node1": here})
        assert own.alive == {"node0": False, "node1": True}, own.findings
        dead = [f for f in own.findings if f.kind == "dead-run"]
        assert [f.node for f in dead] == ["node0"] and dead[0].fixable
        doc = Doctor(recipe, path, {"node0": here, "node1": here}, here=here)
        report = doc.run()
        report = doc.fix(report)
        fixed = [f for f in report.findings if f.kind == "dead-run"]
        assert fixed and all(f.fixed for f in fixed if f.node == "node0")
        assert not Path(node_layout(recipe, None, n0).state_file).exists()
        assert Path(node_layout(recipe, None, n1).state_file).exists()
        assert live.poll() is None
    finally:
        live.kill()
        live.wait()

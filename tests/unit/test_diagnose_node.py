"""How a diagnosis finds the engine's processes under each kind of control: the session
deskside started (process), the unit's control group (systemd, native), the containers'
main processes (Compose); and what it records when the engine is gone or its pid was
reused."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from deskside.diagnose import procs
from deskside.diagnose.node import NodeCollector
from deskside.records.node import NodeState
from deskside.records.read import NODE_READ_SH
from deskside.records.run import RunNode, RunRecord
from deskside.runtime import node_sh
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport

from .proc_tables import P, table_text

NAME = "diagnode"
DIR = f"/srv/deskside/{NAME}"
TREE = "roots 700\n" + table_text([P(700, start=5, comm="python3", argv=("python3", "x"))])


def _run(control: str, kind: str) -> RunRecord:
    return RunRecord(
        recipe="/nonexistent.yaml",
        recipe_name=NAME,
        runtime="ssh",
        control=control,  # type: ignore[arg-type]
        runtime_kind=kind,
        unit=f"deskside-{NAME}",
        compose_project=f"deskside-{NAME}",
        api_url="http://10.0.0.1:8000",
        proxy_url=None,
        served_names=["tiny"],
        started_at="2026-01-01T00:00:00Z",
        release="r1",
        nodes=[
            RunNode(
                name="n0", role="head", node_rank=0, address="10.0.0.1", ssh=None, recipe_dir=DIR
            )
        ],
    )


def _state(control: str, **extra: object) -> NodeState:
    return NodeState.model_validate(
        {
            "recipe": NAME,
            "node": "n0",
            "role": "head",
            "node_rank": 0,
            "release": "r1",
            "control": control,
            "started_at": "2026-01-01T00:00:00Z",
            "started_epoch": 1767225600,
            **extra,
        }
    )


def _transport(state: NodeState, answers: dict[str, str]) -> FakeTransport:
    def answer(argv: Sequence[str]) -> Result:
        words = list(argv)
        if words[:2] == ["sh", "-c"]:
            script = words[2]
            if script == NODE_READ_SH:
                return Result(0, state.model_dump_json(), "")
            if script == procs.TREE_SH:
                return Result(0, TREE, "")
            for key, out in answers.items():
                if key == script == procs.SESSION_PIDS_SH:  # the script adds its claim
                    return Result(0, out + "claim\n" + "\n".join(words[4:7]), "")
                if key == script:
                    return Result(0, out, "")
            return Result(0, "", "")
        if words == ["id", "-u"]:
            return Result(0, "0\n", "")
        for key, out in answers.items():
            if key in words:
                return Result(0, out, "")
        return Result(0, "", "")

    return FakeTransport(label="n0", default=answer)


def _members(c: NodeCollector) -> dict[str, str]:
    return {m.name.split("/")[-1]: (m.text or m.error or m.skipped or "") for m in c.members}


def _ran(t: FakeTransport) -> list[tuple[str, ...]]:
    return [argv for kind, argv, _ in t.calls if kind == "run"]


def test_systemd_reads_the_units_control_group() -> None:
    st = _state("systemd")
    t = _transport(st, {procs.UNIT_PIDS_SH: "700\n", "journalctl": "journal line\n"})
    c = NodeCollector(_run("systemd", "native"), _run("systemd", "native").nodes[0], t).collect()
    got = _members(c)
    assert "control group of deskside-diagnode.service" in got["processes.txt"]
    assert got["engine.log"] == "journal line\n"
    assert ("sh", "-c", procs.UNIT_PIDS_SH, "sh", f"deskside-{NAME}.service") in _ran(t)
    assert any(a[:3] == ("sh", "-c", procs.TREE_SH) and a[4:] == ("700",) for a in _ran(t))


def test_compose_reads_the_containers_main_processes() -> None:
    st = _state("compose")
    t = _transport(st, {"ps": "abc123def456\n", "inspect": "700\n", "logs": "compose line\n"})
    run = _run("compose", "container")
    got = _members(NodeCollector(run, run.nodes[0], t).collect())
    assert "containers abc123def456" in got["processes.txt"]
    assert any(a[:2] == ("docker", "inspect") and a[-1] == "abc123def456" for a in _ran(t))


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (table_text([P(1, 0, start=1)]), "is gone"),
        (table_text([P(700, start=6)]), "is another process now"),  # another start time
        (table_text([P(700, start=5)]), "is another process now"),  # no run tag
    ],
)
def test_a_gone_or_reused_engine_is_recorded(answer: str, why: str) -> None:
    st = _state(
        "process",
        pid=700,
        pid_start=5,
        run_tag=f"{NAME}/n0/20260101000000/engine",
        log=f"{DIR}/logs/r1.log",
    )
    t = _transport(st, {procs.SESSION_PIDS_SH: answer, node_sh.TAIL_SH: "last words\n"})
    run = _run("process", "native")
    got = _members(NodeCollector(run, run.nodes[0], t).collect())
    assert why in got["processes.txt"] and got["engine.log"] == "last words\n"
    assert got["stacks.txt"] == "no engine process to read"
    assert not any(a[:3] == ("sh", "-c", procs.TREE_SH) for a in _ran(t))


def test_the_log_tail_reads_only_deskside_s_own_files(tmp_path: object) -> None:
    """A link planted where a log goes, a linked logs folder, or a path out of the node's
    folder is not read into the bundle (the script refuses it, exit 3)."""
    import subprocess
    from pathlib import Path

    root = Path(str(tmp_path)) / "node"
    (root / "logs").mkdir(parents=True)
    secret = Path(str(tmp_path)) / "secret.txt"
    secret.write_text("not deskside's\n")
    (root / "logs" / "engine.log").write_text("a\nb\n")
    (root / "logs" / "planted.log").symlink_to(secret)
    elsewhere = Path(str(tmp_path)) / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.log").write_text("x\n")
    (root / "linked").symlink_to(elsewhere)

    def tail(path: Path) -> subprocess.CompletedProcess[str]:
        argv = node_sh.tail_file(str(path), 10, str(root), 1000)
        return subprocess.run(argv, capture_output=True, text=True)

    assert tail(root / "logs" / "engine.log").stdout == "a\nb\n"
    for bad in (root / "logs" / "planted.log", root / "linked" / "x.log", secret):
        done = tail(bad)
        assert done.returncode == 3 and "not read" in done.stderr, bad
        assert "deskside's" not in done.stdout

"""One identity check: a process is deskside's only when pid, start time and run tag all
match its record. The verdicts on recorded tables; every path that signals refuses a record
without a start time or a tag (nothing of the stop runs, the reason is said); the stop's
own shell refuses them too; and on live processes the shell's verdict agrees with the
Python table and check."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from deskside.errors import DesksideError
from deskside.facts.procs import PROCESS_IDS, PROCESSES, RUN_TAG, ProcessTable
from deskside.guard.act import engine_stop, node_control
from deskside.identity import Claim, Unproven, judge, stop_command, stop_named, targets
from deskside.layout import NodeLayout
from deskside.operate import restart
from deskside.records.node import NodeState, ServiceState, state_bytes
from deskside.records.read import NODE_READ_SH as STATE_READ_SH
from deskside.records.replica_set import ProxyProcess, SetRecord
from deskside.records.run import RunNode
from deskside.replicas.stop import proxy_alive, stop_proxy
from deskside.runtime import node_sh, nodes
from deskside.runtime.control import Control
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport
from deskside.transport.local import LocalTransport

from .. import procs
from ..monitor_stub import run_record
from .hostile_procs import TAG as HOSTILE_TAG
from .hostile_procs import hostile
from .proc_tables import P, table_text, tagged

TAG = "r/node0/20260101000000/engine"
LOCAL = LocalTransport()


# --------------------------------------------------------------------------- claims, verdicts


@pytest.mark.parametrize(
    ("claim", "why"),
    [
        (Claim("e", None, 5, TAG), "names no pid"),
        (Claim("e", 1, 5, TAG), "never a process deskside started"),
        (Claim("e", 0, 5, TAG), "never a process deskside started"),
        (Claim("e", 10, None, TAG), "no start time"),
        (Claim("e", 10, 5, None), "no run tag"),
        (Claim("e", 10, 5, ""), "run tag is empty"),
        (Claim("e", 10, 5, "a tag\nwith a newline"), "not one deskside makes"),
        (Claim("e", 10, 5, "x" * 513), "not one deskside makes"),
    ],
)
def test_a_claim_that_lacks_anything_proves_nothing(claim: Claim, why: str) -> None:
    problem = claim.problem()
    assert problem is not None and why in problem
    refusal = claim.refusal()
    assert refusal is not None and "not signalled" in refusal
    with pytest.raises(Unproven, match=why):
        stop_command(claim, 5)


def test_a_whole_claim_builds_the_stop() -> None:
    claim = Claim("the engine", 10, 5, TAG)
    assert claim.problem() is None and claim.refusal() is None
    assert stop_command(claim, 5) == node_sh.stop_session(10, 5, 5, TAG)


TABLE = table_text(
    [
        tagged(10, TAG, start=5),
        tagged(11, TAG, ppid=10, session=10, start=6),
        P(12, ppid=11, session=10, start=7, environ=b"\0\0"),  # a rank titled over its env
        P(13, ppid=10, session=10, start=8),  # a member without the tag
        P(20, start=9),  # a foreign process, no tag
        P(21, start=9, state="Z"),
        tagged(30, TAG, ppid=1, session=40, start=11),  # does not lead its session
    ]
)


def _table() -> ProcessTable:
    return PROCESSES.parse(TABLE)


@pytest.mark.parametrize(
    ("claim", "state", "alive", "members"),
    [
        (Claim("e", 10, 5, TAG), "proven", True, (10, 11, 12)),
        (Claim("e", 10, 6, TAG), "replaced", False, ()),
        (Claim("e", 10, 5, "r/node0/20260101000001/engine"), "replaced", False, ()),
        (Claim("e", 10, None, TAG), "unproven", True, (10, 11, 12)),
        (Claim("e", 10, 5, None), "unproven", True, (10, 11, 12, 13)),
        (Claim("e", 20, 9, None), "unproven", True, (20,)),  # alive, never signalled
        (Claim("e", 20, 9, TAG), "replaced", False, ()),
        (Claim("e", 21, 9, None), "zombie", False, ()),
        (Claim("e", 22, 9, TAG), "gone", False, ()),
        (Claim("e", None, 9, TAG), "gone", False, ()),
        (Claim("e", 30, 11, TAG), "proven", False, ()),  # lives, leads no session of its own
    ],
)
def test_verdicts(claim: Claim, state: str, alive: bool, members: tuple[int, ...]) -> None:
    verdict = judge(_table(), claim)
    assert (verdict.state, verdict.alive, verdict.members) == (state, alive, members)
    assert verdict.reason


def test_targets_are_only_those_of_a_whole_claim() -> None:
    table = _table()
    assert targets(table, Claim("e", 10, 5, TAG)) == (10, 11, 12)
    for claim in (
        Claim("e", 10, None, TAG),
        Claim("e", 10, 5, None),
        Claim("e", 10, 5, ""),
        Claim("e", 10, 6, TAG),
        Claim("e", 20, 9, None),
    ):
        assert targets(table, claim) == ()
    # a leader gone: its tagged ranks are still the stop's
    gone = PROCESSES.parse(table_text([tagged(11, TAG, ppid=1, session=10, start=6)]))
    assert targets(gone, Claim("e", 10, 5, TAG)) == (11,)


# --------------------------------------------------------------------------- every signal path


def _state(start: int | None, tag: str | None, **extra: object) -> NodeState:
    return NodeState.model_validate(
        {
            "recipe": "r",
            "node": "node0",
            "role": "head",
            "node_rank": 0,
            "release": None,
            "control": "process",
            "pid": 4321,
            "pid_start": start,
            "run_tag": tag,
            "started_at": "2026-01-01T00:00:00+00:00",
            **extra,
            "log": f"/srv/r/{extra.get('node', 'node0')}/logs/engine.log",
        }
    )


INCOMPLETE = [(None, TAG), (99, None)]  # no start time, no run tag
LAYOUT = NodeLayout.at("/srv/r/node0", "r")


class Node(FakeTransport):
    """A node whose state file is `state` and whose engine (pid 4321, start 99, tagged)
    runs; it records every command."""

    def __init__(self, state: NodeState) -> None:
        super().__init__(label="node0", default=self.answer)
        self.state = state

    def answer(self, argv: Sequence[str]) -> Result:
        if len(argv) > 2 and argv[2] == STATE_READ_SH:
            return Result(0, state_bytes(self.state).decode(), "")
        if len(argv) > 2 and argv[2] == PROCESS_IDS.script:
            return Result(0, table_text([tagged(4321, TAG, start=99)]), "")
        if list(argv) == ["id", "-u"]:
            return Result(0, "0\n", "")
        return LOCAL.run(argv) if argv[:3] == node_sh.refuse("x")[:3] else Result(0, "", "")

    def stops(self) -> list[tuple[str, ...]]:
        return [a for k, a, _ in self.calls if k == "run" and node_sh.STOP_SESSION_SH in a]


@pytest.mark.parametrize(("start", "tag"), INCOMPLETE)
def test_the_control_refuses_the_engine_and_its_services(
    start: int | None, tag: str | None
) -> None:
    proxy = ServiceState(name="proxy", pid=4400, pid_start=start, run_tag=tag, log="/x/p.log")
    state = _state(start, tag, services=[proxy.model_dump()])
    t = Node(state)
    control = Control("process", "native", LAYOUT)
    problems = control.stop_report(t, state, 1)
    assert len(problems) == 2 and all("not signalled" in p for p in problems)
    assert "the proxy of node0 (pid 4400)" in problems[0]
    assert "the engine of node0 (pid 4321)" in problems[1]
    assert not t.stops()
    ops = control.stop_ops("node0", state, 1)
    assert all(node_sh.STOP_SESSION_SH not in op.argv for op in ops)  # type: ignore[attr-defined]
    assert control.alive(t, _state(99, TAG))
    assert control.alive(t, state)  # alive, unproven: reported, never signalled


@pytest.mark.parametrize(("start", "tag"), INCOMPLETE)
def test_down_leaves_it_and_says_why(
    start: int | None, tag: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    t = Node(_state(start, tag))
    run = run_record("r", "http://127.0.0.1:1", recipe_dir="/srv/r/node0")
    leftovers = nodes.down(run, 1, {"node0": t})
    assert len(leftovers) == 1 and "not signalled" in leftovers[0]
    assert not t.stops()
    assert not any(a[:1] == ("rm",) for _, a, _ in t.calls)  # the state file is kept


@pytest.mark.parametrize(("start", "tag"), INCOMPLETE)
def test_the_guard_refuses(start: int | None, tag: str | None) -> None:
    from deskside.recipe.load import load_recipe

    from .exporter_cases import FLAGSHIP

    state = _state(start, tag)
    control = node_control(load_recipe(FLAGSHIP), LAYOUT, state, True)
    with pytest.raises(Unproven, match="not signalled"):
        engine_stop(control, state)


@pytest.mark.parametrize(("start", "tag"), INCOMPLETE)
def test_a_restart_stops_nothing_at_all(start: int | None, tag: str | None) -> None:
    control = Control("process", "native", LAYOUT)
    with pytest.raises(Unproven):
        restart.stop_engine(control, _state(start, tag), 1)
    # two nodes, the second's record incomplete: the first is not stopped either
    good, bad = _state(99, TAG), _state(start, tag, node="node1", node_rank=1, role="worker")
    ts = {"node0": Node(good), "node1": Node(bad)}
    run = run_record(
        "r",
        "http://127.0.0.1:1",
        nodes=[
            RunNode(
                name=n, role=r, node_rank=i, address="127.0.0.1", ssh=None, recipe_dir=f"/srv/r/{n}"
            )
            for i, (n, r) in enumerate([("node0", "head"), ("node1", "worker")])
        ],
    )
    controls = {n: Control("process", "native", NodeLayout.at(f"/srv/r/{n}", "r")) for n in ts}
    with pytest.raises(DesksideError, match="not signalled"):
        restart.restart_engines(run, ts, controls, grace=1, timeout=1)
    assert not ts["node0"].stops() and not ts["node1"].stops()


@pytest.mark.parametrize(("start", "tag"), [(None, TAG), (99, "")])
def test_a_replica_sets_proxy_is_not_stopped(
    start: int | None, tag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    record = SetRecord(
        recipe="/nonexistent.yaml",
        recipe_name="rs",
        runtime="local",
        groups=["a"],
        proxy_url="http://127.0.0.1:4100",
        proxy=ProxyProcess(pid=4321, pid_start=start, run_tag=tag, log="/dev/null"),
        started_at="2026-01-01T00:00:00+00:00",
    )
    why = stop_proxy(record, 1)
    assert why is not None and "not signalled" in why and "the proxy (pid 4321)" in why
    assert record.proxy is not None
    assert proxy_alive(record.proxy, Node(_state(99, TAG)))  # alive, unproven: not stopped


def test_doctor_stops_only_a_pid_with_the_start_it_saw() -> None:
    with pytest.raises(Unproven):
        stop_named(4321, None)
    with pytest.raises(Unproven):
        stop_named(1, 99)
    assert stop_named(4321, 99) == node_sh.stop_pid(4321, 99)


def test_one_name_for_the_run_tag() -> None:
    assert node_sh.RUN_TAG == RUN_TAG


# --------------------------------------------------------------------------- the node's shell


def _spawn(script: str, tag: str | None, tmp: Path) -> int:
    env = {RUN_TAG: tag} if tag else {}
    return LOCAL.spawn(["sh", "-c", script], env=env, log_path=str(tmp / "log"))


def _start(pid: int) -> int:
    start = node_sh.parse_proc_start(LOCAL.run(node_sh.proc_start(pid)).stdout)
    assert start is not None
    return start


@pytest.mark.parametrize(("start", "tag"), [("", TAG), ("x", TAG), ("START", "")])
def test_the_stop_shell_refuses_an_empty_start_or_tag(start: str, tag: str, tmp_path: Path) -> None:
    pid = _spawn("exec sleep 60", TAG, tmp_path)
    try:
        time.sleep(0.2)
        real = str(_start(pid)) if start == "START" else start
        r = LOCAL.run(["sh", "-c", node_sh.STOP_SESSION_SH, "sh", str(pid), "1", real, tag])
        assert r.rc == 2 and "refusing to signal" in r.stderr
        assert procs.alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)
        procs.reap(pid)


# A session: a tagged leader, a tagged child, a rank whose title hid its environment, a
# member whose environment reads without the tag.
SESSION_SH = (
    f"{sys.executable} -c 'import setproctitle, time; "
    'setproctitle.setproctitle("VLLM::Worker_TP1"); time.sleep(60)\' & '
    "sleep 60 & env -u DESKSIDE_RUN sleep 60 & exec sleep 60"
)


@pytest.mark.parametrize("which", ["right", "other start", "other tag"])
def test_the_shell_and_the_python_check_agree(which: str, tmp_path: Path) -> None:
    """The stop's own check on the node signals exactly what the process table and the
    identity check name as its targets."""
    pid = _spawn(SESSION_SH, TAG, tmp_path)
    try:
        deadline = time.monotonic() + 20
        while len(procs.session_members(pid)) < 4 or not any(
            p.cmdline.startswith("VLLM::") for p in procs.session_members(pid)
        ):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        start = _start(pid)
        claim = {
            "right": Claim("the engine", pid, start, TAG),
            "other start": Claim("the engine", pid, start + 1, TAG),
            "other tag": Claim("the engine", pid, start, "r/node0/20260101000001/engine"),
        }[which]
        table = PROCESSES.read(LOCAL.run(PROCESSES.argv()))
        assert isinstance(table, ProcessTable)
        expected = set(targets(table, claim))
        before = {p.pid for p in procs.session_members(pid)}
        assert len(expected) == (3 if which == "right" else 0)
        r = LOCAL.run(stop_command(claim, 1))
        assert r.ok, r.stderr
        procs.reap(pid)
        after = {p.pid for p in procs.session_members(pid)}
        assert before - after == expected
    finally:
        for p in procs.session_members(pid):
            os.kill(p.pid, signal.SIGKILL)  # the test's own processes
        procs.reap(pid)


def test_the_shell_and_the_python_check_agree_on_hostile_processes() -> None:
    """Command names with spaces, parentheses and newlines, a title written over the
    environment, a 1.2 MB environment, a tag too long to be one, a zombie: the stop signals
    exactly the table's targets."""
    with hostile() as h:
        claim = Claim("the engine", h.sid, _start(h.sid), HOSTILE_TAG)
        table = PROCESSES.read(LOCAL.run(PROCESSES.argv()))
        assert isinstance(table, ProcessTable)
        expected = set(targets(table, claim))
        assert {h.pids["odd"], h.pids["forger"], h.pids["titled"]} <= expected
        assert not {h.pids[r] for r in ("untagged", "longtag", "oddenv", "zombie")} & expected
        before = {p.pid for p in procs.session_members(h.sid)}
        r = LOCAL.run(stop_command(claim, 2))
        assert r.ok, r.stderr
        procs.reap(h.sid)
        after = {p.pid for p in procs.session_members(h.sid)}
        assert before - after == expected

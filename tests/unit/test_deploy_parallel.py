"""Every node at once: `execute_waves` runs each node's operations of a wave in a thread of
its own (a barrier that every node must reach proves they run together), waves stay in
order, a failure names each failed node's operation and keeps what every other node did;
and the deploy of a four-node recipe pushes to every node at once, starts the workers
together and before the head, stops the head before the workers, and rolls back exactly
what each node did."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from deskside.deploy import releases as rel
from deskside.deploy.runtime import deploy
from deskside.deploy.start import PollRound
from deskside.errors import DesksideError
from deskside.layout import NodeLayout
from deskside.planner.inputs import plan_recipe
from deskside.recipe.load import load_recipe
from deskside.runtime import node_sh
from deskside.runtime.ops import Executed, NodesFailed, OpFailed, Run, at_once, execute_waves
from deskside.runtime.pipeline import Outcome, UpOptions, UpReport
from deskside.runtime.ready import Watched
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport

from ..deploy_cases import ensure_tiny_model, ssh_recipe_data, write_recipe
from .fake_hosts import FakeApi, FakeHost, Journal

NODES = ("node0", "node1", "node2", "node3")


def _run(node: str, name: str) -> Run:
    return Run(node, ("step", name), f"step {name}")


class Gate:
    """A barrier every one of `parties` threads must reach within `timeout` seconds."""

    def __init__(self, parties: int, timeout: float = 5.0) -> None:
        self.barrier = threading.Barrier(parties, timeout=timeout)

    def __call__(self) -> None:
        self.barrier.wait()


def _hosts(answer: Any = None) -> dict[str, FakeTransport]:
    out = {}
    for n in NODES:
        t = FakeTransport(label=n)
        if answer is not None:
            t.default = answer(n)
        out[n] = t
    return out


def test_a_wave_runs_every_node_at_once_and_waves_in_order() -> None:
    gate = Gate(len(NODES))
    order: list[tuple[str, str]] = []

    def answer(node: str) -> Any:
        def run(argv: Sequence[str]) -> Result:
            if argv[1] == "meet":
                gate()  # run one node after the other, the first would wait here alone
            order.append((node, argv[1]))
            return Result(0, "", "")

        return run

    hosts = _hosts(answer)
    waves = [
        [op for n in NODES for op in (_run(n, "prepare"), _run(n, "meet"))],
        [_run(n, "after") for n in NODES],
    ]
    done = execute_waves(waves, hosts, Executed())
    # planned order in `done`, whatever order the threads finished in
    assert done.done == [op for wave in waves for op in wave]
    for n in NODES:
        mine = [step for node, step in order if node == n]
        assert mine == ["prepare", "meet", "after"]
    first_after = min(i for i, (_, step) in enumerate(order) if step == "after")
    assert all(step != "meet" for _, step in order[first_after:])
    assert set(done.seconds) == set(NODES)


def test_a_failed_node_is_named_with_its_operation_and_the_others_are_kept() -> None:
    def answer(node: str) -> Any:
        def run(argv: Sequence[str]) -> Result:
            if node == "node1" and argv[1] == "b":
                return Result(3, "", "disk full")
            if node == "node2" and argv[1] == "b":
                raise DesksideError("root@10.0.0.3: connection lost", hint="check sshd")
            return Result(0, "", "")

        return run

    hosts = _hosts(answer)
    waves = [[op for n in NODES for op in (_run(n, "a"), _run(n, "b"))], [_run("node0", "c")]]
    done = Executed()
    with pytest.raises(NodesFailed) as caught:
        execute_waves(waves, hosts, done)
    err = caught.value
    assert set(err.failures) == {"node1", "node2"}
    assert err.message.startswith("2 nodes failed:")
    assert "node1: step b failed (exit 3): disk full" in err.message
    assert "node2: step b: root@10.0.0.3: connection lost" in err.message
    assert err.hint == "node2: check sshd"
    # node0 finished its share of the wave; the next wave never started
    assert done.done == [
        _run("node0", "a"),
        _run("node0", "b"),
        _run("node1", "a"),
        _run("node2", "a"),
    ]
    assert ("run", ("step", "c"), {}) not in hosts["node0"].calls


def test_one_failure_keeps_its_message_and_stops_the_others() -> None:
    started = threading.Event()

    def answer(node: str) -> Any:
        def run(argv: Sequence[str]) -> Result:
            if node == "node0":
                started.wait(5)
                return Result(1, "", "no space")
            started.set()
            time.sleep(0.05)  # node0 fails while this operation runs
            return Result(0, "", "")

        return run

    hosts = _hosts(answer)
    waves = [
        [_run("node0", "a")] + [_run("node1", str(i)) for i in range(50)],
    ]
    done = Executed()
    with pytest.raises(OpFailed) as caught:
        execute_waves(waves, hosts, done)
    assert caught.value.message == "node0: step a failed (exit 1): no space"
    ran = [op for op in done.done if op.node == "node1"]
    assert 1 <= len(ran) < 50  # it ended the operation it was on, then stopped


def test_a_slow_node_is_named_while_the_others_wait() -> None:
    def answer(node: str) -> Any:
        def run(argv: Sequence[str]) -> Result:
            if node == "node2":
                time.sleep(0.4)
            return Result(0, "", "")

        return run

    said: list[str] = []
    execute_waves([[_run(n, "push") for n in NODES]], _hosts(answer), Executed(), said.append, 0.1)
    slow = [m for m in said if m.startswith("waiting for")]
    assert slow and all(m.startswith("waiting for node2: step push (") for m in slow)


def test_at_once_keeps_the_order_given_and_raises_after_every_call() -> None:
    gate = Gate(3)
    ended: list[str] = []

    def call(node: str) -> str:
        gate()
        if node == "b":
            raise ValueError("b broke")
        time.sleep(0.02)
        ended.append(node)
        return node.upper()

    assert at_once(["c", "a"], lambda n: n * 2) == {"c": "cc", "a": "aa"}
    with pytest.raises(ValueError, match="b broke"):
        at_once(["a", "b", "c"], call)
    assert sorted(ended) == ["a", "c"]


def test_outcome_waves_are_its_operations_in_planned_order() -> None:
    a, b, c = _run("node0", "a"), _run("node1", "b"), _run("node0", "c")
    assert Outcome("x", waves=[[a, b], [c]]).ops == [a, b, c]


# -- the deploy of a four-node recipe


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    yield tmp_path / "home"


class GatedHost(FakeHost):
    """A fake node whose first put of each deploy, and whose engine spawn, can wait at a
    gate shared with other nodes."""

    def __init__(self, label: str, journal: Journal, kv_line: str) -> None:
        super().__init__(label, journal, kv_line)
        self.put_gate: Gate | None = None
        self.spawn_gate: Gate | None = None
        self.fail_put: str | None = None  # a path suffix whose put fails

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        if self.put_gate is not None:
            gate, self.put_gate = self.put_gate, None
            gate()
        if self.fail_put and path.endswith(self.fail_put):
            raise DesksideError(f"{self.label}: cannot write {path}: permission denied")
        super().put(data, path, mode)

    def spawn(
        self, argv: Sequence[str], *, env: object = None, log_path: str, cwd: str | None = None
    ) -> int:
        if self.spawn_gate is not None:
            self.spawn_gate()
        return super().spawn(argv, env=env, log_path=log_path, cwd=cwd)


class Four:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.journal = Journal()
        data = ssh_recipe_data(
            addresses=("10.90.0.1", "10.90.0.2"),
            interfaces=("eth1", "eth1"),
            identity_file="~/.ssh/id_ed25519",
            root="/srv/deskside",
            hf_cache="/var/lib/deskside/hf-cache",
        )
        for i in (2, 3):
            extra = copy.deepcopy(data["cluster"]["nodes"][1])
            extra |= {"name": f"node{i}", "address": f"10.90.0.{i + 1}"}
            extra["fabric"] = {"interface": "eth1", "address": f"10.90.0.{i + 1}"}
            data["cluster"]["nodes"].append(extra)
        data["engine"] |= {"tensor_parallel_size": 4, "nnodes": 4}
        self.data = data
        ensure_tiny_model(tmp)
        path = write_recipe(tmp, data)
        recipe = load_recipe(path)
        kv = plan_recipe(recipe, path).kv_cache_line
        self.hosts = {n: GatedHost(n, self.journal, kv) for n in NODES}
        self.api = FakeApi(self.hosts["node0"], list(recipe.model.all_names))
        self.paths = NodeLayout.of(recipe)

    def deploy(self, max_num_seqs: int = 6) -> UpReport:
        data = json.loads(json.dumps(self.data))
        data["engine"]["max_num_seqs"] = max_num_seqs
        path = write_recipe(self.tmp, data)
        recipe = load_recipe(path)
        options = UpOptions(
            timeout=5, grace=1, poll_interval=0.01, http_transport=self.api.transport()
        )
        return deploy(recipe, path, plan_recipe(recipe, path), options, transports=self.hosts)

    def where(self, mark: int, host: str, pred: Any) -> list[int]:
        entries = self.journal.entries[mark:]
        return [i for i, (h, _, argv) in enumerate(entries) if h == host and pred(argv)]


def _is(script: str) -> Any:
    return lambda argv: len(argv) > 2 and argv[:2] == ("sh", "-c") and argv[2] == script


def test_deploy_pushes_to_every_node_at_once_and_starts_workers_before_the_head(
    tmp_path: Path,
) -> None:
    c = Four(tmp_path)
    shared = Gate(len(NODES))  # every node's first put: only reached together if pushed at once
    for host in c.hosts.values():
        host.put_gate = shared
    workers = Gate(3)  # every worker's engine: only reached together if started at once
    for n in NODES[1:]:
        c.hosts[n].spawn_gate = workers
    report = c.deploy()
    assert report.ok, (report.failed_stage, report.error)
    push = report.stage("push")
    assert push is not None and set(push.hosts) == set(NODES)
    spawned = {n: c.journal.index(n, "spawn") for n in NODES}
    assert all(spawned.values())
    assert max(spawned[n][0] for n in NODES[1:]) < spawned["node0"][0]
    switches = [i for n in NODES for i in c.journal.index(n, "run", _is(rel.SWITCH_SH))]
    commits = [
        i for n in NODES for i in c.journal.index(n, "run", lambda a: a[:3] == ("mv", "-T", "--"))
    ]
    assert max(commits) < min(switches)
    # a redeploy stops the old head before any old worker
    for host in c.hosts.values():
        host.spawn_gate = None
    mark = len(c.journal.entries)
    again = c.deploy(max_num_seqs=5)
    assert again.ok, again.error
    stops = {n: c.where(mark, n, _is(node_sh.STOP_SESSION_SH)) for n in NODES}
    assert all(stops.values())
    assert stops["node0"][0] < min(stops[n][0] for n in NODES[1:])


def test_a_failed_push_on_one_node_names_it_and_switches_nothing(tmp_path: Path) -> None:
    c = Four(tmp_path)
    good = c.deploy()
    assert good.ok
    c.hosts["node2"].fail_put = "/launch.sh"
    report = c.deploy(max_num_seqs=5)
    assert report.failed_stage == "push"
    assert report.error is not None
    assert report.error.startswith("node2: pushing the release: node2: cannot write")
    for host in c.hosts.values():  # every node still runs the good release
        assert host.links[c.paths.current] == f"releases/{good.release}"
    # node2 committed no release folder (the others stopped after their current operation)
    commits = {n: c.journal.index(n, "run", lambda a: a[:3] == ("mv", "-T", "--")) for n in NODES}
    assert len(commits["node2"]) == 1
    assert all(1 <= len(commits[n]) <= 2 for n in NODES)
    push = report.stage("push")
    assert push is not None and push.status == "failed" and "node2" in push.hosts


def test_a_worker_that_fails_to_start_rolls_back_the_workers_that_did(tmp_path: Path) -> None:
    c = Four(tmp_path)
    good = c.deploy()
    assert good.ok
    mark = len(c.journal.entries)
    broken = c.hosts["node3"]
    real_spawn = broken.spawn
    lost = [True]  # the new release's start only: the rollback's start goes through

    def refuse(argv: Sequence[str], **kwargs: Any) -> int:
        if lost and argv[-1].endswith("launch.sh"):
            lost.pop()
            raise DesksideError("root@10.90.0.4: connection lost")
        return real_spawn(argv, **kwargs)

    broken.spawn = refuse  # type: ignore[method-assign]
    report = c.deploy(max_num_seqs=5)
    assert report.failed_stage == "start"
    assert (report.error or "").startswith("node3: starting worker node3")
    assert report.rollback is not None and report.rollback.ok, report.rollback
    spawns = [h for h, kind, _ in c.journal.entries[mark:] if kind == "spawn"]
    # the head never started the new release (the rollback's start only); the workers that
    # did were stopped again: every node runs exactly the engine its state file records
    assert spawns.count("node0") == 1
    assert spawns.count("node1") == spawns.count("node2") == 2
    for host in c.hosts.values():
        assert host.links[c.paths.current] == f"releases/{good.release}"
        assert host.state is not None and host.alive == {host.state["pid"]}


def test_readiness_polls_every_node_at_once_each_getting_its_own_answer() -> None:
    gate = Gate(3)
    count = {"a": 0, "b": 0, "c": 0}

    def poll_of(name: str) -> Any:
        def poll() -> tuple[bool, bytes]:
            gate()  # one after the other, the first would wait here alone
            count[name] += 1
            return True, f"{name}{count[name]}\n".encode()

        return poll

    nodes = [Watched(n, "worker", n, poll_of(n)) for n in count]
    PollRound(nodes)
    for expected in (1, 2):
        assert [n.poll() for n in nodes] == [(True, f"{n}{expected}\n".encode()) for n in count]

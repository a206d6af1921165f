"""The deploy pipeline against fake nodes (tests/unit/fake_hosts.py): stage order, workers
started before the head, releases pushed to a staging folder and renamed before any
`current` switches, dry runs that change nothing, rollback commands, unchanged redeploys,
preflight refusals, the proxy key (0600, never printed), the container runtime's systemd
and Compose commands, and down/status/logs of a deployed run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deskside.deploy import releases as rel
from deskside.deploy.runtime import STAGES, deploy
from deskside.errors import DesksideError
from deskside.layout import MANIFEST_FILE, NodeLayout
from deskside.operate.status import status
from deskside.planner.inputs import plan_recipe
from deskside.planner.plan import Plan
from deskside.recipe.load import load_recipe
from deskside.recipe.types import Recipe
from deskside.records.run import load_run
from deskside.records.where import run_file
from deskside.runtime import node_sh
from deskside.runtime.nodes import down, log_tail, open_logs
from deskside.runtime.pipeline import UpOptions, UpReport

from ..deploy_cases import ensure_tiny_model, ssh_recipe_data, write_recipe
from .fake_hosts import BAD_FLAG, GOOD_FACTS, FakeApi, FakeHost, Journal

ROOT_DIR = "/srv/deskside"
DIGEST_IMAGE = "vllm/vllm-openai:v0.32.0@sha256:" + "ab" * 32


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    yield tmp_path / "home"


class Cluster:
    """Two fake nodes, the head's fake API, and a way to deploy recipe variants."""

    def __init__(self, tmp: Path, **changes: Any) -> None:
        self.tmp = tmp
        self.journal = Journal()
        self.base = ssh_recipe_data(
            addresses=("10.90.0.1", "10.90.0.2"),
            interfaces=("eth1", "eth1"),
            identity_file="~/.ssh/id_ed25519",
            root=ROOT_DIR,
            hf_cache="/var/lib/deskside/hf-cache",
        )
        ensure_tiny_model(tmp)
        recipe, _, plan = self.recipe(**changes)
        self.kv_line = plan.kv_cache_line
        self.head = FakeHost("node0", self.journal, self.kv_line)
        self.worker = FakeHost("node1", self.journal, self.kv_line)
        self.api = FakeApi(self.head, list(recipe.model.all_names))
        self.paths = NodeLayout.of(recipe)

    def recipe(self, **changes: Any) -> tuple[Recipe, Path, Plan]:
        data = json.loads(json.dumps(self.base))
        for dotted, value in changes.items():
            *parents, last = dotted.split("__")
            target = data
            for key in parents:
                target = target[key]
            target[last] = value
        path = write_recipe(self.tmp, data, "recipe.yaml")
        recipe = load_recipe(path)
        return recipe, path, plan_recipe(recipe, path)

    def deploy(self, dry_run: bool = False, **changes: Any) -> UpReport:
        recipe, path, plan = self.recipe(**changes)
        options = UpOptions(
            dry_run=dry_run,
            timeout=5,
            grace=1,
            poll_interval=0.01,
            http_transport=self.api.transport(),
        )
        return deploy(
            recipe,
            path,
            plan,
            options,
            transports={"node0": self.head, "node1": self.worker},
        )

    @property
    def hosts(self) -> list[FakeHost]:
        return [self.head, self.worker]


def _is(script: str) -> Any:
    return lambda argv: len(argv) > 2 and argv[:2] == ("sh", "-c") and argv[2] == script


def test_first_deploy_runs_every_stage_and_starts_workers_first(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    report = c.deploy()
    assert report.ok, (report.error, report.hint)
    assert [s.name for s in report.stages] == list(STAGES)
    assert all(s.status == "ok" for s in report.stages)
    assert report.previous == {"node0": None, "node1": None}
    assert report.logged_kv_cache_line == report.planned_kv_cache_line
    worker_start = c.journal.index("node1", "spawn")
    head_start = c.journal.index("node0", "spawn")
    assert len(worker_start) == len(head_start) == 1
    assert worker_start[0] < head_start[0]
    rid = report.release
    assert rid is not None and rel.RELEASE_RE.fullmatch(rid)
    for host, role in ((c.head, "head"), (c.worker, "worker")):
        assert host.links[c.paths.current] == f"releases/{rid}"
        state = host.state
        assert state is not None and state["release"] == rid and state["role"] == role
        spawned = c.journal.entries[c.journal.index(host.label, "spawn")[0]][2]
        assert spawned == ("sh", f"{c.paths.release(rid)}/launch.sh")
    # the head holds cluster/ (the lock); the worker does not
    assert f"{c.paths.release(rid)}/cluster/deskside.lock" in c.head.files
    assert not c.worker.tree(f"{c.paths.release(rid)}/cluster")
    # the model folder went where render.model_upload says, with its manifest
    models = f"{ROOT_DIR}/ssh-tiny/models/tiny-deepseek-v3"
    for host in c.hosts:
        assert f"{models}/config.json" in host.files
        assert f"{models}/{MANIFEST_FILE}" in host.files
    # this machine remembers the run for down/status/logs
    run = load_run("ssh-tiny")
    assert run is not None and run.release == rid and run.ready_at is not None


def test_push_stages_then_commits_then_switches_every_node(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    report = c.deploy()
    rid = report.release
    assert rid is not None
    staging = c.paths.staging(rid)
    commits, switches = [], []
    for host in c.hosts:
        release_puts = [
            i
            for i in c.journal.index(host.label, "put")
            if c.journal.entries[i][2][0].startswith(c.paths.releases)
        ]
        puts = [c.journal.entries[i][2][0] for i in release_puts]
        assert puts and all(p.startswith(staging + "/") for p in puts)
        (commit,) = c.journal.index(
            host.label, "run", lambda a: a == tuple(rel.commit_release(c.paths, rid))
        )
        (switch,) = c.journal.index(host.label, "run", _is(rel.SWITCH_SH))
        assert max(release_puts) < commit < switch
        commits.append(commit)
        switches.append(switch)
        argv = c.journal.entries[switch][2]
        # a new link renamed over `current`: never a moment without one
        assert argv[4:] == (
            f"releases/{rid}",
            f"{c.paths.recipe_dir}/.current-{rid}",
            c.paths.current,
        )
        assert "ln -sfn" in argv[2] and "mv -Tf" in argv[2]
    assert max(commits) < min(switches)  # every node has the release before any switches
    assert max(switches) < min(i for h in c.hosts for i in c.journal.index(h.label, "spawn"))
    assert c.head.modes[f"{c.paths.release(rid)}/launch.sh"] == 0o755


def test_dry_run_lists_every_operation_and_changes_nothing(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    first = c.deploy()
    before = {h.label: (dict(h.files), dict(h.links), set(h.alive)) for h in c.hosts}
    mark = len(c.journal.entries)
    report = c.deploy(dry_run=True, engine__max_num_seqs=5)
    assert report.ok and report.dry_run
    assert [s.name for s in report.stages] == list(STAGES)
    status = {s.name: s.status for s in report.stages}
    assert status == {
        "preflight": "ok",
        "render": "ok",
        "diff": "ok",
        "push": "planned",
        "start": "planned",
        "ready": "planned",
        "contract": "planned",
    }
    for h in c.hosts:
        assert (dict(h.files), dict(h.links), set(h.alive)) == before[h.label]
    changed = [e for e in c.journal.entries[mark:] if e[1] != "run"]
    assert changed == []  # no put, no spawn
    ran = [e[2] for e in c.journal.entries[mark:]]
    assert not [a for a in ran if _is(node_sh.STOP_SESSION_SH)(a) or _is(rel.SWITCH_SH)(a)]
    diffs = {d.host: d for d in report.diffs}
    assert diffs["node0"].restart_engine and "engine arguments changed" in diffs["node0"].values
    assert report.release is None and report.previous == {
        "node0": first.release,
        "node1": first.release,
    }
    # the transcript: what the deploy would do, node by node, in order
    lines = [(t["stage"], t["node"], t["op"]) for t in report.transcript]
    pushes = [op for stage, node, op in lines if stage == "push" and op.startswith("put ")]
    assert any("/launch.sh (mode 0755" in op for op in pushes)
    stops = [
        i
        for i, (st, _, op) in enumerate(lines)
        if st == "start" and "STOP" not in op and op.startswith("run sh -c") and "kill" in op
    ]
    spawns = [(i, node) for i, (st, node, op) in enumerate(lines) if op.startswith("spawn ")]
    assert [node for _, node in spawns] == ["node1", "node0"]  # workers first
    assert [lines[i][1] for i in stops] == ["node0", "node1"]  # the old engines, head first
    assert max(stops) < min(i for i, _ in spawns)
    switches = [node for st, node, op in lines if st == "push" and rel.SWITCH_SH in op]
    assert switches == ["node0", "node1"]
    assert [(t["stage"], t["node"]) for t in report.transcript if t["op"].startswith("check ")] == [
        ("ready", "node0"),
        ("contract", "node0"),
    ]


def test_broken_release_rolls_back_to_the_previous_one(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    good = c.deploy()
    assert good.ok
    good_pids = {h.label: h.state["pid"] for h in c.hosts if h.state}  # type: ignore[index]
    mark = len(c.journal.entries)
    bad = c.deploy(engine__extra_args=[BAD_FLAG])
    assert not bad.ok and bad.failed_stage == "ready"
    assert "exited during start-up" in (bad.error or "")
    assert BAD_FLAG in (bad.hint or "")  # the engine's own words, from its log
    assert bad.release != good.release
    assert bad.previous == {"node0": good.release, "node1": good.release}
    rb = bad.rollback
    assert rb is not None and rb.ok, rb
    assert rb.to_release == {"node0": good.release, "node1": good.release}
    entries = c.journal.entries[mark:]

    def where(host: str, kind: str, pred: Any = None) -> list[int]:
        return [
            i
            for i, (h, k, a) in enumerate(entries)
            if h == host and k == kind and (pred is None or pred(a))
        ]

    stops = {h: where(h, "run", _is(node_sh.STOP_SESSION_SH)) for h in ("node0", "node1")}
    # the good engines stopped before the new release started (head first) ...
    first_stop = {h: entries[stops[h][0]][2][4] for h in stops}
    assert first_stop == {h: str(p) for h, p in good_pids.items()}
    assert stops["node0"][0] < stops["node1"][0]
    # ... then the new release started and died; rollback stopped it, switched back, and
    # started the good release again, workers first
    switches = {h: where(h, "run", _is(rel.SWITCH_SH)) for h in stops}
    assert [entries[i][2][4] for i in switches["node0"]] == [
        f"releases/{bad.release}",
        f"releases/{good.release}",
    ]
    spawns = {h: where(h, "spawn") for h in stops}
    assert [entries[i][2][1] for i in spawns["node1"]] == [
        f"{c.paths.release(bad.release or '')}/launch.sh",
        f"{c.paths.release(good.release or '')}/launch.sh",
    ]
    assert spawns["node1"][1] < spawns["node0"][1]  # rollback: worker first, too
    assert stops["node0"][-1] < switches["node0"][-1] < spawns["node0"][-1]
    for host in c.hosts:
        assert host.links[c.paths.current] == f"releases/{good.release}"
        assert host.state is not None and host.state["release"] == good.release
        assert host.tree(c.paths.release(bad.release or ""))  # kept for inspection
    run = load_run("ssh-tiny")
    assert run is not None and run.release == good.release and run.ready_at


def test_contract_failure_rolls_back(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    good = c.deploy()
    c.api.fail_chats = 1  # the new release answers one name wrong
    report = c.deploy(engine__max_num_seqs=5)
    assert report.failed_stage == "contract"
    assert "deepseek-v4-flash-tiny: HTTP 500" in (report.error or "")
    assert report.rollback is not None and report.rollback.ok, report.rollback
    assert c.head.links[c.paths.current] == f"releases/{good.release}"


def test_unreachable_node_during_rollback_is_reported(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    c.deploy()
    answer = c.worker.default

    def lost(argv: Any) -> Any:
        if tuple(argv[:3]) == ("sh", "-c", node_sh.STOP_SESSION_SH):
            raise DesksideError("root@10.90.0.2: unreachable (connection lost)")
        return answer(argv)

    c.worker.default = lost
    report = c.deploy(engine__max_num_seqs=5)
    assert report.failed_stage == "start"
    assert "unreachable" in (report.error or "")
    assert report.rollback is not None and not report.rollback.ok
    assert report.rollback.detail == "the rollback itself failed"
    assert "unreachable" in (report.rollback.error or "")


def test_failed_first_deploy_leaves_nothing_running(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    report = c.deploy(engine__extra_args=[BAD_FLAG])
    assert not report.ok and report.failed_stage == "ready"
    assert report.rollback is not None and report.rollback.ok
    assert "nothing runs" in report.rollback.detail
    for host in c.hosts:
        assert c.paths.current not in host.links
        assert host.state is None
        assert not host.alive


def test_unchanged_redeploy_leaves_the_engines_alone(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    first = c.deploy()
    mark = len(c.journal.entries)
    again = c.deploy()
    assert again.ok
    status = {s.name: s.status for s in again.stages}
    assert status["push"] == status["start"] == "skipped"
    assert status["ready"] == status["contract"] == "ok"
    assert again.release == first.release
    assert not [e for e in c.journal.entries[mark:] if e[1] in ("put", "spawn")]
    assert not [e for e in c.journal.entries[mark:] if _is(node_sh.STOP_SESSION_SH)(e[2])]


def test_changed_model_folder_is_pushed_again(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    c.deploy()
    (tmp_path / "models" / "tiny-deepseek-v3" / "extra.txt").write_text("new file\n")
    report = c.deploy()
    assert report.ok and report.stage("push").status == "ok"  # type: ignore[union-attr]
    model = f"{ROOT_DIR}/ssh-tiny/models/tiny-deepseek-v3"
    assert c.worker.files[f"{model}/extra.txt"] == b"new file\n"


def test_preflight_refusals_change_nothing(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    # something listens on the engine port 8888 (0x22B8) on the head; no vLLM on the worker
    c.head.facts = GOOD_FACTS + "listen=0100000A:22B8\n"
    c.worker.facts = GOOD_FACTS.replace("vllm=0.32.0", "vllm=")
    report = c.deploy()
    assert not report.ok and report.failed_stage == "preflight"
    assert report.rollback is None
    assert "port 8888 (engine.port (the API)) is already in use on node0" in (report.error or "")
    assert "node1: vLLM is not installed" in (report.error or "")
    assert "ss -ltnp" in (report.hint or "")
    assert not [e for e in c.journal.entries if e[1] in ("put", "spawn")]


def test_own_running_engine_holds_its_ports(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    c.deploy()
    c.head.facts = GOOD_FACTS + "listen=0100000A:22B8\nlisten=0100000A:61A8\n"
    report = c.deploy(engine__max_num_seqs=5)
    assert report.ok, report.error


def test_unreachable_node_fails_preflight(tmp_path: Path) -> None:
    c = Cluster(tmp_path)

    def refuse(argv: Any) -> Any:
        raise DesksideError("root@10.90.0.2: unreachable (timed out)", hint="check sshd")

    c.worker.default = refuse
    report = c.deploy()
    assert report.failed_stage == "preflight"
    assert "node1: root@10.90.0.2: unreachable" in (report.error or "")


def test_proxy_key_is_pushed_0600_and_never_shown(tmp_path: Path, home: Path) -> None:
    c = Cluster(tmp_path, proxy={"enabled": True, "port": 4000})
    c.head.facts = GOOD_FACTS + "program=litellm\n"
    report = c.deploy(proxy={"enabled": True, "port": 4000})
    assert report.ok, (report.error, report.hint)
    key_path = f"{ROOT_DIR}/ssh-tiny/secrets/proxy-master-key"
    key = c.head.files[key_path].decode().strip()
    assert key.startswith("sk-") and c.head.modes[key_path] == 0o600
    assert key_path not in c.worker.files
    local = home / "secrets" / "ssh-tiny" / "proxy-master-key"
    assert local.stat().st_mode & 0o777 == 0o600
    # never on a command line, in the report, the lock or the local run record
    assert not [e for e in c.journal.entries if any(key in w for w in e[2])]
    assert key not in json.dumps(report.to_dict(), default=str)
    rid = report.release or ""
    assert key not in c.head.files[f"{c.paths.release(rid)}/cluster/deskside.lock"].decode()
    assert key not in run_file("ssh-tiny").read_text()
    # the proxy started after the head engine; the contract went through it, with the key
    spawns = [c.journal.entries[i][2] for i in c.journal.index("node0", "spawn")]
    assert spawns[0][-1].endswith("/launch.sh")
    assert spawns[1][:2] == ("/bin/sh", f"{c.paths.current}/cluster/litellm/run-proxy.sh")
    assert spawns[1][2] == key_path  # the key's file, never its value
    contract = [r for r in c.api.seen if r.url.path == "/v1/chat/completions"]
    assert {r.url.port for r in contract} == {4000}
    assert {r.headers["authorization"] for r in contract} == {f"Bearer {key}"}
    assert sorted(json.loads(r.content)["model"] for r in contract) == [
        "deepseek-v4-flash-tiny",
        "tiny",
    ]


def _container(c: Cluster, **more: Any) -> UpReport:
    return c.deploy(
        engine__image=DIGEST_IMAGE,
        runtime__kind="container",
        runtime__systemd=True,
        runtime__python=None,
        **more,
    )


def test_container_runtime_with_systemd_installs_and_restarts_units(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    docker = GOOD_FACTS + "docker=27.3.1\ncompose=2.29.7\nsystemd=1\n"
    c.head.facts = c.worker.facts = docker
    report = _container(c)
    assert report.ok, (report.error, report.hint)
    rid = report.release or ""
    unit = "deskside-ssh-tiny.service"
    expected = [
        (
            "install",
            "-m",
            "0644",
            "--",
            f"{c.paths.release(rid)}/{unit}",
            f"/etc/systemd/system/{unit}",
        ),
        ("systemctl", "daemon-reload"),
        ("systemctl", "enable", "--quiet", unit),
        ("systemctl", "restart", unit),
    ]
    order = []
    for host in c.hosts:
        runs = [c.journal.entries[i] for i in c.journal.index(host.label, "run")]
        seen = [a for _, _, a in runs if a[0] in ("install", "systemctl")]
        assert seen == expected
        order.append(c.journal.entries.index((host.label, "run", ("systemctl", "restart", unit))))
        assert not c.journal.index(host.label, "spawn")
    assert order[1] < order[0]  # the worker's unit restarted before the head's
    # a new release stops (and disables) the running units first, head first; its start
    # enables them again
    mark = len(c.journal.entries)
    again = _container(c, engine__max_num_seqs=5)
    assert again.ok, again.error
    stop = ("systemctl", "disable", "--now", "--quiet", unit)
    stops = [i for i, e in enumerate(c.journal.entries[mark:]) if e[2] == stop]
    assert [c.journal.entries[mark + i][0] for i in stops] == ["node0", "node1"]


def test_container_runtime_without_systemd_uses_compose(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    c.head.facts = c.worker.facts = GOOD_FACTS + "docker=27.3.1\ncompose=2.29.7\n"
    report = c.deploy(engine__image=DIGEST_IMAGE, runtime__kind="container", runtime__python=None)
    assert report.ok, (report.error, report.hint)
    up = (
        "docker",
        "compose",
        "--project-name",
        "deskside-ssh-tiny",
        "--file",
        f"{c.paths.current}/compose.yaml",
        "up",
        "--detach",
        "--remove-orphans",
    )
    assert c.journal.index("node1", "run", lambda a: a == up)
    assert (
        c.journal.index("node1", "run", lambda a: a == up)[0]
        < c.journal.index("node0", "run", lambda a: a == up)[0]
    )


def test_container_preflight_needs_docker(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    report = _container(c)
    assert report.failed_stage == "preflight"
    assert "Docker is not installed" in (report.error or "")
    assert "systemd is not running" in (report.error or "")


def test_down_status_logs_of_a_deployed_run(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    report = c.deploy()
    run = load_run("ssh-tiny")
    assert run is not None and run.recipe_name == "ssh-tiny"
    transports = {"node0": c.head, "node1": c.worker}
    st = status(run, transports, http_transport=c.api.transport())
    assert st.cluster == "READY"
    assert [(n.name, n.state, n.processes) for n in st.nodes] == [
        ("node0", "running", 3),
        ("node1", "running", 3),
    ]
    logs = open_logs(run, None, transports)
    assert [log.node for log in logs] == ["node0", "node1"]
    assert "KV cache size" in log_tail(logs[0], 10)
    worker_pid = c.worker.state["pid"]  # type: ignore[index]
    c.worker.alive.discard(worker_pid)
    st = status(run, transports, http_transport=c.api.transport())
    assert st.cluster == "DEGRADED"
    assert any("node1 (worker): engine of release" in r for r in st.reasons)
    assert down(run, transports=transports) == []
    assert c.head.state is None and c.worker.state is None
    assert not c.head.alive
    assert load_run("ssh-tiny") is None
    assert report.ok

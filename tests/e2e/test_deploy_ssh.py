"""`deskside up` over real SSH (issue 6 acceptance): two network-namespace hosts, each
running its own sshd (started here: generated host keys, one authorized client key, no
passwords, the test's own known_hosts), get the tiny two-node recipe (TP=2, native runtime,
the real LiteLLM proxy in front, Prometheus, node_exporter and deskside's exporter beside)
deployed to them; the cluster reaches READY — the engine binds the wildcard 0.0.0.0 and
deskside probes the head's own address; a dry run of a changed recipe lists every operation
and changes nothing; a broken release (an engine flag vLLM rejects) fails fast and deskside
rolls back to the working release (READY again, `current` back on it); status, logs and
down work over SSH.

These are claims about deskside's orchestration over SSH, so the working releases run the
stand-in engine (tests/stand_in_engine.py: vLLM's API, key check, log line and session
shape, started in a second); the broken release runs the real vLLM, which refuses the flag
in its own words. What is about vLLM itself over SSH (TP=2 across the link, the engine's KV
line equals the plan, every name serves tokens) is checked on real vLLM in
tests/e2e/test_real_hosts.py; that vLLM answers /v1 only with its key, on the shared
cluster (tests/e2e/test_up_two_nodes.py).

The hosts are not named as namespaces in the recipe: they are plain `ssh:` nodes at the
namespace addresses. Each host sees its own `runtime.root` (a bind mount in the mount
namespace its sshd runs in, see tests/sshd_hosts.py), as two machines would, so the two
nodes' releases cannot collide.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from deskside.planner.inputs import plan_recipe
from deskside.recipe.load import load_recipe

from .. import procs
from ..cli_process import deskside as run_deskside
from ..deploy_cases import ensure_tiny_model, ssh_recipe_data, write_recipe
from ..prometheus_targets import active_targets
from ..sshd_hosts import SshHosts, can_run, ssh_hosts
from ..stand_in_engine import stand_in

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).parents[2]
PROXY_BIN = Path(os.environ.get("DESKSIDE_PROXY_VENV", ROOT / ".venv-proxy")) / "bin"
PROXY_PORT = 4000
BAD_FLAG = "--deskside-e2e-no-such-flag"


def deskside(home: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return run_deskside(*args, home=home, timeout=timeout)


@dataclass
class Setup:
    hosts: SshHosts
    home: Path
    good: Path
    broken: Path
    changed: Path  # a harmless change (max_num_seqs) for the dry run
    first: dict[str, Any]  # the first deploy's report
    first_seconds: float

    def current(self, host: int) -> str:
        return os.readlink(self.hosts.hosts[host].private_dir / "ssh-tiny" / "current")

    def state(self, host: int) -> dict[str, Any]:
        path = self.hosts.hosts[host].private_dir / "ssh-tiny" / "state.json"
        return json.loads(path.read_text())  # type: ignore[no-any-return]

    def cli(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return deskside(self.home, *args, timeout=timeout)

    def engine_key(self) -> str:
        """The engine key deskside made (this machine's copy, 0600)."""
        line = (self.home / "secrets" / "ssh-tiny" / "engine.env").read_text().strip()
        name, _, key = line.partition("=")
        assert name == "VLLM_API_KEY" and key
        return key

    def engine_auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.engine_key()}"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    ok, why = can_run()
    if not ok:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("deploy-ssh")
    with ssh_hosts(base / "hosts", "e", 2, base / "node-root") as hosts:
        h0, h1 = hosts.hosts
        data = ssh_recipe_data(
            addresses=(h0.address, h1.address),
            interfaces=(h0.interface, h1.interface),
            identity_file=str(hosts.identity_file),
            root=str(hosts.private_root),
            hf_cache=str(base / "hf-cache"),
            engine_host="0.0.0.0",  # the API on every address of the head
        )
        # a real LiteLLM in front (its own virtualenv, as LiteLLM's pins clash with vLLM's):
        # the engine then takes /v1 requests only with its own key
        assert (PROXY_BIN / "litellm").exists(), f"litellm is not installed in {PROXY_BIN}"
        data["proxy"] = {
            "enabled": True,
            "port": PROXY_PORT,
            "litellm": str(PROXY_BIN / "litellm"),
        }
        # the monitoring beside: Prometheus on the head, node_exporter and deskside's exporter
        # on every host, as processes (Grafana runs under Docker Compose only)
        data["monitoring"] = {
            "enabled": True,
            "scrape_interval": "5s",
            "deskside": str(Path(sys.executable).parent / "deskside"),
        }
        # the stand-in engine, except for a release that names BAD_FLAG: real vLLM
        python = base / "engine" / "python"
        data["runtime"]["python"] = str(python)
        recipes = base / "recipes"
        ensure_tiny_model(recipes)
        good = write_recipe(recipes, data, "good.yaml")
        stand_in(python.parent, plan_recipe(load_recipe(good), good).kv_cache_line, BAD_FLAG)
        data["engine"]["max_num_seqs"] = 5
        changed = write_recipe(recipes, data, "changed.yaml")
        data["engine"]["max_num_seqs"] = 6
        data["engine"]["extra_args"] = [BAD_FLAG]
        broken = write_recipe(recipes, data, "broken.yaml")
        home = base / "home"
        t0 = time.monotonic()
        r = deskside(home, "up", str(good), "--known-hosts", str(hosts.known_hosts), "--json")
        seconds = time.monotonic() - t0
        assert r.returncode == 0, r.stdout + r.stderr
        made = Setup(hosts, home, good, broken, changed, json.loads(r.stdout), seconds)
        try:
            yield made
        finally:
            deskside(home, "down", timeout=120)


def test_first_deploy_runs_every_stage_and_is_ready(setup: Setup) -> None:
    report = setup.first
    assert [s["name"] for s in report["stages"]] == [
        "preflight",
        "render",
        "diff",
        "push",
        "start",
        "ready",
        "contract",
    ]
    assert all(s["status"] == "ok" for s in report["stages"]), report["stages"]
    assert report["ok"] and report["rollback"] is None
    assert report["previous"] == {"node0": None, "node1": None}
    assert [d["values"] for d in report["diffs"]] == [["first deployment"]] * 2
    assert report["logged_kv_cache_line"] == report["planned_kv_cache_line"]
    print(f"\nfirst deploy: {setup.first_seconds:.1f} s wall, {report['seconds']:.1f} s pipeline")
    for s in report["stages"]:
        print(f"  {s['name']:<10} {s['seconds']:6.1f} s  {s['detail']}")


def test_each_host_has_its_own_release_tree(setup: Setup) -> None:
    release = setup.first["release"]
    for i in (0, 1):
        assert setup.current(i) == f"releases/{release}"
        tree = setup.hosts.hosts[i].private_dir / "ssh-tiny"
        node = f"node{i}"
        assert (tree / "current" / "launch.sh").read_text().count(f"node {node} ") == 1
        assert (tree / "current" / "cluster").is_dir() == (i == 0)  # the head holds cluster/
        assert (tree / "models" / "tiny-deepseek-v3" / "config.json").is_file()
        assert setup.state(i)["release"] == release
        assert setup.state(i)["role"] == ("head" if i == 0 else "worker")
    assert not any(setup.hosts.private_root.iterdir())  # nothing landed in the shared folder


def test_the_worker_runs_on_the_other_host_and_every_alias_serves(setup: Setup) -> None:
    h0, h1 = setup.hosts.hosts
    netns = subprocess.run(
        ["ip", "netns", "identify", str(setup.state(1)["pid"])], capture_output=True, text=True
    ).stdout.strip()
    assert netns == h1.netns  # the worker rank runs on the other host
    url = setup.first["api_url"]
    assert url == f"http://{h0.address}:8888"
    with httpx.Client(timeout=120, headers=setup.engine_auth()) as client:
        listed = [m["id"] for m in client.get(f"{url}/v1/models").json()["data"]]
        assert listed == ["deepseek-v4-flash-tiny", "tiny"]  # the names deskside launched
        for name in listed:
            r = client.post(
                f"{url}/v1/chat/completions",
                json={
                    "model": name,
                    "messages": [{"role": "user", "content": "hello"}],
                    "max_tokens": 8,
                    "ignore_eos": True,
                },
            )
            assert r.status_code == 200, r.text


def test_the_proxy_is_the_only_door(setup: Setup) -> None:
    """The engine behind the proxy refuses requests without its key; the proxy serves with
    its master key; the engine key is on no command line, in no rendered file, and its
    file on the head is 0600."""
    h0 = setup.hosts.hosts[0]
    api = setup.first["api_url"]
    proxy = setup.first["proxy_url"]
    assert proxy == f"http://{h0.address}:{PROXY_PORT}"
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with httpx.Client(timeout=120) as client:
        assert client.post(f"{api}/v1/chat/completions", json=body).status_code == 401
        assert client.get(f"{api}/v1/models").status_code == 401
        wrong = {"Authorization": "Bearer sk-not-the-key"}
        assert client.get(f"{api}/v1/models", headers=wrong).status_code == 401
        assert client.get(f"{api}/v1/models", headers=setup.engine_auth()).status_code == 200
        assert client.get(f"{api}/health").status_code == 200  # liveness stays open
        master = (setup.home / "secrets" / "ssh-tiny" / "proxy-master-key").read_text().strip()
        r = client.post(
            f"{proxy}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {master}"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] is not None
    key = setup.engine_key()
    tree = h0.private_dir / "ssh-tiny"
    engine_env = tree / "secrets" / "engine.env"
    assert engine_env.read_text().strip() == f"VLLM_API_KEY={key}"
    assert engine_env.stat().st_mode & 0o777 == 0o600
    assert (tree / "secrets").stat().st_mode & 0o777 == 0o700
    for path in (tree / "current").rglob("*"):
        if path.is_file():
            assert key not in path.read_text(errors="replace"), path
    head = procs.read_proc(setup.state(0)["pid"])
    assert head is not None and key not in head.cmdline
    members = procs.session_members(setup.state(0)["pid"])
    assert members and all(key not in m.cmdline for m in members)


def test_monitoring_runs_on_the_hosts(setup: Setup) -> None:
    """Prometheus on the head scrapes the engine, each host's node_exporter and deskside
    exporter, and itself; every target is up. Each service is recorded on its host."""
    h0 = setup.hosts.hosts[0]
    assert {s["name"] for s in setup.state(0)["services"]} == {
        "proxy",
        "prometheus",
        "node_exporter",
        "exporter",
    }
    assert {s["name"] for s in setup.state(1)["services"]} == {"node_exporter", "exporter"}
    assert any("Grafana runs under Docker Compose only" in n for n in setup.first["notes"])
    targets = active_targets(f"http://{h0.address}:9090", 6)
    assert sorted(t["labels"]["job"] for t in targets) == [
        "deskside",
        "deskside",
        "node",
        "node",
        "prometheus",
        "vllm",
    ], targets
    assert all(t["health"] == "up" for t in targets), targets


def test_status_and_logs_over_ssh(setup: Setup) -> None:
    r = setup.cli("status", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    st = json.loads(r.stdout)
    assert st["cluster"] == "READY" and st["release"] == setup.first["release"]
    assert [n["name"] for n in st["nodes"]] == ["node0", "node1"]
    assert all(n["state"] == "running" and n["rss_bytes"] > 0 for n in st["nodes"])
    assert all(n["processes"] >= 1 for n in st["nodes"])
    r = setup.cli("logs", "-n", "400", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    logs = json.loads(r.stdout)
    assert set(logs) == {"node0", "node1"}
    assert any("KV cache size" in line for line in logs["node0"])
    r = setup.cli("logs", "node1", "-n", "3")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 3


def test_dry_run_changes_nothing(setup: Setup) -> None:
    before = [setup.current(0), setup.current(1)]
    pids = [setup.state(0)["pid"], setup.state(1)["pid"]]
    kh = str(setup.hosts.known_hosts)
    r = setup.cli("up", str(setup.changed), "--dry-run", "--known-hosts", kh, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    stages = {s["name"]: s["status"] for s in report["stages"]}
    assert stages == {
        "preflight": "ok",
        "render": "ok",
        "diff": "ok",
        "push": "planned",
        "start": "planned",
        "ready": "planned",
        "contract": "planned",
    }
    spawns = [t["node"] for t in report["transcript"] if t["op"].startswith("spawn ")]
    # the worker, the head, then the services: the head's proxy, Prometheus, node_exporter
    # and exporter, the worker's node_exporter and exporter
    assert spawns == ["node1", "node0", *["node0"] * 4, *["node1"] * 2]
    changed = {d["host"]: d for d in report["diffs"]}
    assert changed["node0"]["restart_engine"] and changed["node1"]["restart_engine"]
    assert "engine arguments changed" in changed["node0"]["values"]
    assert [setup.current(0), setup.current(1)] == before
    assert [setup.state(0)["pid"], setup.state(1)["pid"]] == pids
    assert all(procs.alive(pid) for pid in pids)


def test_broken_release_rolls_back_to_the_working_one(setup: Setup) -> None:
    good = setup.first["release"]
    kh = str(setup.hosts.known_hosts)
    t0 = time.monotonic()
    r = setup.cli("up", str(setup.broken), "--known-hosts", kh, "--json")
    seconds = time.monotonic() - t0
    assert r.returncode != 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert not report["ok"]
    assert report["failed_stage"] == "ready", report
    assert "exited during start-up" in report["error"]
    assert BAD_FLAG in report["hint"]  # vLLM's own words about the flag, from the log
    bad = report["release"]
    assert bad != good and report["previous"] == {"node0": good, "node1": good}
    rollback = report["rollback"]
    assert rollback["ok"], json.dumps(rollback, indent=2)
    assert rollback["to_release"] == {"node0": good, "node1": good}
    assert [setup.current(0), setup.current(1)] == [f"releases/{good}"] * 2
    assert setup.state(0)["release"] == good and setup.state(1)["release"] == good
    # the broken release stays on the nodes for inspection, with its log
    logs = setup.hosts.hosts[1].private_dir / "ssh-tiny" / "logs"
    (log,) = logs.glob(f"{bad}.*Z.log")  # the engine's (services log to .<name>.log)
    assert f"vllm: error: unrecognized arguments: {BAD_FLAG}" in log.read_text()  # real vLLM
    stages = {s["name"]: s["seconds"] for s in report["stages"]}
    print(
        f"\nbroken deploy + rollback: {seconds:.1f} s wall; good engines stopped in "
        f"{stages['start']:.1f} s; broken release failed after {stages['ready']:.1f} s; "
        f"rollback {rollback['seconds']:.1f} s (stop + switch back "
        f"{rollback['stop_seconds']:.1f} s)"
    )
    st = json.loads(setup.cli("status", "--json").stdout)
    assert st["cluster"] == "READY" and st["release"] == good
    with httpx.Client(timeout=120, headers=setup.engine_auth()) as client:
        r2 = client.post(
            f"{report['api_url']}/v1/chat/completions",
            json={
                "model": "tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
            },
        )
        assert r2.status_code == 200, r2.text


def test_down_stops_everything_over_ssh(setup: Setup) -> None:
    pids = [setup.state(0)["pid"], setup.state(1)["pid"]]
    pids += [svc["pid"] for i in (0, 1) for svc in setup.state(i)["services"]]
    assert len(pids) == 2 + 6
    r = setup.cli("down", "--json", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout) == {"recipe": "ssh-tiny", "stopped": True, "leftovers": []}
    for pid in pids:
        assert not procs.session_members(pid)
    for h in setup.hosts.hosts:
        assert not (h.private_dir / "ssh-tiny" / "state.json").exists()
        left = subprocess.run(["ip", "netns", "pids", h.netns], capture_output=True, text=True)
        cmdlines = [
            (info.cmdline if (info := procs.read_proc(int(p))) else "") for p in left.stdout.split()
        ]
        engines = ("deskside.engine.cpu", "stand_in_engine")  # real vLLM, the stand-in
        assert not [c for c in cmdlines if any(e in c for e in engines)], cmdlines
    assert setup.cli("status", "--json").returncode != 0

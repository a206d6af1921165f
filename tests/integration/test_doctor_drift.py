"""Nodes that must match, for real over SSH: two network-namespace hosts with sshd
(`tests/sshd_hosts.py`), each seeing its own copy of one folder. The recipe's engine loads
NCCL from that folder (VLLM_NCCL_SO_PATH), which holds a different build on each host:
`must_match` names both files' sha256, and `deskside up` refuses in preflight with the
same text, changing nothing on the hosts. With the same build on both, no drift is found.

Needs root, iproute2 and openssh-server (scripts/system-deps installs them)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deskside.doctor.match import must_match
from deskside.recipe.load import load_recipe
from deskside.runtime.transports import transport_for
from deskside.transport import ssh

from ..cli_process import deskside
from ..deploy_cases import ensure_tiny_model, ssh_recipe_data, write_recipe
from ..sshd_hosts import SshHosts, can_run, ssh_hosts

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Setup:
    hosts: SshHosts
    drifted: Path  # the recipe whose NCCL differs between the hosts
    same: Path  # the recipe whose NCCL is the same build on both
    sha256: tuple[str, str]  # of the drifted library on host 0 and host 1
    home: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    ok, why = can_run()
    if not ok:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("doctor-drift")
    with ssh_hosts(base / "hosts", "m", 2, base / "node-root") as hosts:
        shas = []
        for i, h in enumerate(hosts.hosts):
            build = f"NCCL 2.27.{i + 5} build for host {i}\n".encode()
            (h.private_dir / "nccl").mkdir()
            (h.private_dir / "nccl" / "libnccl.so.2").write_bytes(build)
            (h.private_dir / "same").mkdir()
            (h.private_dir / "same" / "libnccl.so.2").write_bytes(b"NCCL 2.27.7\n")
            shas.append(hashlib.sha256(build).hexdigest())
        h0, h1 = hosts.hosts
        data = ssh_recipe_data(
            addresses=(h0.address, h1.address),
            interfaces=(h0.interface, h1.interface),
            identity_file=str(hosts.identity_file),
            root=str(hosts.private_root / "deskside"),
            hf_cache=str(base / "hf-cache"),
        )
        recipes = base / "recipes"
        data["engine"]["env"] = {
            "VLLM_NCCL_SO_PATH": str(hosts.private_root / "nccl" / "libnccl.so.2")
        }
        drifted = write_recipe(recipes, data, "drifted.yaml")
        data["engine"]["env"] = {
            "VLLM_NCCL_SO_PATH": str(hosts.private_root / "same" / "libnccl.so.2")
        }
        same = write_recipe(recipes, data, "same.yaml")
        ensure_tiny_model(recipes)
        try:
            yield Setup(hosts, drifted, same, (shas[0], shas[1]), base / "home")
        finally:
            ssh.close_all()


def _must_match(s: Setup, recipe_path: Path) -> list:  # type: ignore[type-arg]
    recipe = load_recipe(recipe_path)
    known = str(s.hosts.known_hosts)
    transports = {n.name: transport_for(n, known) for n in recipe.cluster.nodes}
    return must_match(recipe, recipe_path, transports)


def test_must_match_names_both_nccl_builds(setup: Setup) -> None:
    found = _must_match(setup, setup.drifted)
    problems = [f for f in found if f.severity == "problem"]
    assert [f.kind for f in problems] == ["drift"], found
    what = problems[0].what
    assert what.startswith("NCCL library differs: node0 ")
    assert setup.sha256[0] in what and setup.sha256[1] in what


def test_the_same_build_on_both_hosts_is_no_drift(setup: Setup) -> None:
    found = _must_match(setup, setup.same)
    assert [f.kind for f in found] == ["match"], found
    assert "NCCL library" in found[0].what and "vLLM" in found[0].what


def test_doctor_names_the_drift_over_ssh(setup: Setup) -> None:
    r = deskside(
        "doctor",
        str(setup.drifted),
        "--known-hosts",
        str(setup.hosts.known_hosts),
        "--json",
        home=setup.home,
        timeout=300,
    )
    assert r.returncode != 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    drift = [f for f in report["findings"] if f["kind"] == "drift"]
    assert len(drift) == 1, report["findings"]
    assert drift[0]["what"].startswith("NCCL library differs")
    assert setup.sha256[0] in drift[0]["what"] and setup.sha256[1] in drift[0]["what"]
    assert drift[0]["fixable"] is False and drift[0]["fixed"] is False
    assert report["ok"] is False


def test_up_refuses_in_preflight_and_changes_nothing(setup: Setup) -> None:
    before = [sorted(p.name for p in h.private_dir.iterdir()) for h in setup.hosts.hosts]
    r = deskside(
        "up",
        str(setup.drifted),
        "--known-hosts",
        str(setup.hosts.known_hosts),
        "--json",
        home=setup.home,
        timeout=300,
    )
    assert r.returncode != 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["failed_stage"] == "preflight" and report["rollback"] is None
    assert "NCCL library differs" in report["error"]
    assert setup.sha256[0] in report["error"] and setup.sha256[1] in report["error"]
    assert f"deskside doctor {setup.drifted}" in report["hint"]
    after = [sorted(p.name for p in h.private_dir.iterdir()) for h in setup.hosts.hosts]
    assert after == before  # no runtime.root, no release, nothing started
    assert not (setup.home / "runs" / "ssh-tiny").exists()

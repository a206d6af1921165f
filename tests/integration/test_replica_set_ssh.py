"""A replica set of `ssh:` nodes, deployed for real over SSH: four network-namespace hosts
with their own sshd (`tests/sshd_hosts.py`), two groups of two, each deployed like any
recipe (push, start workers first, ready, contract), with a stand-in for vLLM
(`tests/stand_in_engine.py`: a real vLLM start would cost minutes here); then the real
LiteLLM proxy started over SSH on the first group's head from the rendered `run-proxy.sh`.
Requests through it reach both groups; the set's status is READY; stopping one group
leaves it DEGRADED and serving; `down` stops the proxy and every engine on the hosts.

Needs root, iproute2 and openssh-server (scripts/system-deps installs them)."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deskside.operate.set_status import set_status
from deskside.planner.inputs import plan_recipe
from deskside.recipe.groups import group_recipes
from deskside.recipe.load import load_recipe
from deskside.records.replica_set import load_set
from deskside.replicas.plans import plan_set
from deskside.replicas.start import up_set
from deskside.replicas.stop import down_set
from deskside.transport import ssh

from .. import procs
from ..deploy_cases import ensure_tiny_model, ssh_recipe_data, write_recipe
from ..sshd_hosts import SshHosts, can_run, ssh_hosts
from ..stand_in_engine import stand_in

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
PROXY_BIN = Path(os.environ.get("DESKSIDE_PROXY_VENV", ROOT / ".venv-proxy")) / "bin"
NAME = "rs-ssh"


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    ok, why = can_run()
    if not ok:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("replica-ssh")
    with ssh_hosts(base / "hosts", "r", 4, base / "root") as made:
        yield made
    ssh.close_all()


def recipe_path(hosts: SshHosts, folder: Path, python: Path) -> Path:
    h = hosts.hosts
    data = ssh_recipe_data(
        addresses=(h[0].address, h[1].address),
        interfaces=(h[0].interface, h[1].interface),
        identity_file=str(hosts.identity_file),
        root=str(hosts.private_root / "deskside"),
        hf_cache=str(hosts.private_root / "hf"),
        name=NAME,
    )
    nodes = data["cluster"]["nodes"]
    for i, role in ((2, "head"), (3, "worker")):
        node = copy.deepcopy(nodes[1])
        node.update(name=f"node{i}", address=h[i].address, role=role)
        node["fabric"] = {"interface": h[i].interface, "address": h[i].address}
        nodes.append(node)
    data["engine"].pop("host")  # each group's head serves on its own address
    data["replicas"] = {
        "groups": [
            {"name": "a", "nodes": ["node0", "node1"]},
            {"name": "b", "nodes": ["node2", "node3"]},
        ],
        "routing_strategy": "simple-shuffle",
        "num_retries": 3,
        "cooldown_time": 60,
        "timeout": 10,
        "health_check_interval": 0,
    }
    data["proxy"] = {"enabled": True, "port": 4180, "litellm": str(PROXY_BIN / "litellm")}
    data["survive"] = {"watch": False}
    data["runtime"]["python"] = str(python)  # the stand-in's wrapper
    ensure_tiny_model(folder)
    return write_recipe(folder, data, f"{NAME}.yaml")


def test_a_set_of_ssh_hosts_deploys_serves_degrades_and_stops(
    hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deskside.runtime.pipeline import UpOptions

    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    python = tmp_path / "engine" / "python"
    path = recipe_path(hosts, tmp_path / "recipe", python)
    recipe = load_recipe(path)
    one = next(iter(group_recipes(recipe).values()))
    stand_in(python.parent, plan_recipe(one, path).kv_cache_line)
    options = UpOptions(known_hosts=str(hosts.known_hosts), timeout=120, poll_interval=0.2)
    report = up_set(recipe, path, plan_set(recipe, path), options)
    try:
        assert report.ok, (report.failed_stage, report.error, report.hint)
        h = hosts.hosts
        assert report.proxy_url == f"http://{h[0].address}:4180"  # the first group's head
        record = load_set(NAME)
        assert record is not None and record.proxy_node == "node0"
        st = set_status(record)  # the hosts' known_hosts file, from the set's record
        assert st.cluster == "READY", st.reasons
        assert st.proxy == "healthy"
        master = (tmp_path / "home" / "secrets" / NAME / "proxy-master-key").read_text().strip()
        auth = {"Authorization": f"Bearer {master}"}
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        with httpx.Client(timeout=60, headers=auth) as client:
            answers = [
                client.post(f"{report.proxy_url}/v1/chat/completions", json=body) for _ in range(12)
            ]
            assert [r.status_code for r in answers] == [200] * 12, answers[0].text
            # LiteLLM reaches each group through its port of the drain gate, which runs
            # beside the proxy on the first head and relays to both groups' engines
            bases = {r.headers.get("x-litellm-model-api-base") for r in answers}
            assert bases == {f"http://{h[0].address}:{p}/v1" for p in (4181, 4182)}, bases
            gate = client.get(f"http://{h[0].address}:4181/deskside/gate").json()
            assert gate["relayed"]["a"] >= 1 and gate["relayed"]["b"] >= 1, gate
            assert sum(gate["relayed"].values()) >= 12 and gate["drained"] == [], gate
            # one group stopped: DEGRADED, and the proxy serves through the other
            assert down_set(record, grace=5, group="b") == []
            st = set_status(record, str(hosts.known_hosts))
            assert st.cluster == "DEGRADED" and st.groups["b"] is None, st
            answers = [
                client.post(f"{report.proxy_url}/v1/chat/completions", json=body) for _ in range(6)
            ]
            assert [r.status_code for r in answers] == [200] * 6, answers[0].text
    finally:
        record = load_set(NAME)
        left = down_set(record, grace=5) if record is not None else []
    assert left == []
    assert load_set(NAME) is None
    ours = (str(tmp_path / "engine"), f"{hosts.private_root}/deskside/{NAME}")
    left_running = [
        p for p in procs.all_procs() if p.state != "Z" and any(x in p.cmdline for x in ours)
    ]
    assert not left_running, left_running

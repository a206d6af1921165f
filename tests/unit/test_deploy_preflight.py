"""The deploy's preflight: its facts read in one round trip for real on this machine, the
checks on recorded answers (each problem naming what is wrong and how to fix it), and the
refusal when the nodes differ in what they must share (fake hosts: nothing changes)."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deskside.deploy import preflight as pf
from deskside.deploy.drift import must_match, versions_fact
from deskside.engine.launch import engine_python
from deskside.errors import DesksideError
from deskside.facts.base import gather
from deskside.facts.versions import host_versions
from deskside.recipe.load import load_recipe_text
from deskside.recipe.types import Recipe
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport
from deskside.transport.local import LocalTransport

from ..deploy_cases import ssh_recipe_data
from .fact_answers import answer_round_trip, fact_argvs
from .fake_hosts import GOOD_FACTS, fact_answer
from .test_deploy_pipeline import Cluster
from .test_facts_drift import IP_JSON
from .test_facts_versions import SHA_A, SPARK

SHA_B = "cd34" + "1" * 60


def _recipe(**runtime: object) -> Recipe:
    data = ssh_recipe_data(
        addresses=("10.9.0.1", "10.9.0.2"),
        interfaces=("e0", "e0"),
        identity_file="~/.ssh/id",
        root="/opt/deskside",
        hf_cache="/var/hf",
    )
    data["runtime"].update(runtime)
    return load_recipe_text(json.dumps(data), "r.yaml", base_dir=Path("/tmp"))


def answering(facts: str) -> FakeTransport:
    """A node whose facts are the `key=value` lines `facts` (see `fake_hosts.fact_answer`)."""
    return FakeTransport(
        default=lambda argv: (
            answer_round_trip(argv, lambda f: fact_answer(facts, f))
            or Result(1, "", "not a facts round trip")
        )
    )


def judged(facts: str, recipe: Recipe, recipe_dir: str = "/opt/deskside/ssh-tiny") -> pf.HostFacts:
    wanted = pf.preflight_facts(
        recipe,
        recipe.head,
        recipe_dir,
        versions_fact(recipe, {}, engine_python(recipe), nccl=False),
    )
    return wanted.values(gather(answering(facts), *wanted.all()))


def test_the_facts_read_this_machine_in_one_round_trip(tmp_path: Path) -> None:
    recipe = _recipe()
    where = str(tmp_path / "not" / "yet")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        wanted = pf.preflight_facts(
            recipe, recipe.head, where, host_versions(python=sys.executable, nccl=None)
        )
        got = wanted.values(gather(LocalTransport(), *wanted.all()))
    assert got.unread == ()
    assert got.login is not None and got.login.uid == os.getuid()
    assert got.disk is not None and got.disk.existing == str(tmp_path) and got.disk.writable
    assert got.disk.free_bytes is not None and got.disk.free_bytes > 0
    assert port in got.listening
    assert got.python is not None and got.python.version == sys.version.split()[0]
    assert got.python.vllm == "0.32.0" and got.python.deskside
    missing = pf.preflight_facts(
        recipe, recipe.head, "/", host_versions(python="no-such-python", nccl=None)
    )
    python = missing.values(gather(LocalTransport(), *missing.all())).python
    assert python is not None and python.missing


def test_checks_name_what_is_wrong_and_how_to_fix_it() -> None:
    recipe = _recipe()
    head = recipe.head
    ports = pf.head_ports(recipe, (8888, 25000))
    good = judged(
        "uid=1000\nsudo=0\nexisting=/opt\nwritable=1\ndisk_free_kib=9999999\n"
        "kernel=6.8\npython=3.11\nvllm=0.31.1\ndeskside=1\nprogram=g++\n",
        recipe,
    )
    found = pf.check_node(
        good,
        recipe=recipe,
        node=head,
        recipe_dir="/opt/deskside/ssh-tiny",
        own_engine_running=False,
        need_bytes=0,
        head_ports=ports,
    )
    assert found.problems == []  # native, no systemd: a plain user will do
    assert found.notes == ["node0: vLLM 0.31.1 installed, the recipe pins 0.32.0"]
    systemd = _recipe(systemd=True)
    bad = judged(
        "uid=1000\nsudo=0\nexisting=/opt\nwritable=0\ndisk_free_kib=1000\n"
        "kernel=6.8\npython_missing=1\nlisten=00000000:61A8\n",
        systemd,
    )
    found = pf.check_node(
        bad,
        recipe=systemd,
        node=head,
        recipe_dir="/opt/deskside/ssh-tiny",
        own_engine_running=False,
        need_bytes=10 * 1024**2,
        head_ports=ports,
    )
    messages = [p.message for p in found.problems]
    assert any("not root and has no passwordless sudo" in m for m in messages)
    assert any("cannot be created or written" in m for m in messages)
    assert any("MiB free under /opt" in m for m in messages)
    assert any("port 25000 (cluster.fabric.master_port" in m for m in messages)
    assert any("not found" in m for m in messages)
    assert any("systemd is not running" in m for m in messages)
    # vLLM on CPU compiles kernels at the first request: a node without g++ is refused
    assert any(m.startswith("g++ (engine.device: cpu)") for m in messages)
    assert all(p.hint for p in found.problems)


def test_a_fact_the_node_did_not_answer_is_a_problem() -> None:
    recipe = _recipe()
    facts = judged("uid=0\nexisting=/\nwritable=1\npython=3.11\nvllm=0.32.0\n", recipe)
    assert [u.fact for u in facts.unread] == ["host_versions"]  # no kernel line: not read
    found = pf.check_node(
        facts,
        recipe=recipe,
        node=recipe.head,
        recipe_dir="/r",
        own_engine_running=False,
        need_bytes=0,
        head_ports={},
    )
    assert found.problems[0].message.startswith(
        "could not read host versions on node0: no kernel line"
    )


@pytest.mark.parametrize("mode", ["644", "600", "missing", "600 foreign"])
def test_proxy_key_file_checks(mode: str) -> None:
    data = ssh_recipe_data(
        addresses=("10.9.0.1", "10.9.0.2"),
        interfaces=("e0", "e0"),
        identity_file="~/.ssh/id",
        root="/opt/deskside",
        hf_cache="/var/hf",
    )
    data["proxy"] = {"enabled": True, "master_key_file": "/etc/deskside/key"}
    recipe = load_recipe_text(json.dumps(data), "r.yaml", base_dir=Path("/tmp"))
    facts = judged(
        "uid=0\nexisting=/\nwritable=1\nkernel=6.8\npython=3.11\nvllm=0.32.0\ndeskside=1\n"
        "program=litellm\nprogram=g++\n"
        + (f"key_mode={mode}\n" if mode != "600 foreign" else "key_mode=600\nkey_owner=1000\n"),
        recipe,
    )
    found = pf.check_node(
        facts,
        recipe=recipe,
        node=recipe.head,
        recipe_dir="/opt/deskside/ssh-tiny",
        own_engine_running=False,
        need_bytes=0,
        head_ports=pf.head_ports(recipe, (8888, 25000)),
    )
    messages = " ".join(p.message for p in found.problems)
    if mode == "600":
        assert messages == ""
    elif mode == "644":
        assert "readable by others (mode 644)" in messages
    elif mode == "600 foreign":
        assert "belongs to uid 1000, not to the user deskside logs in as (uid 0)" in messages
    else:
        assert "missing or unreadable" in messages


# --------------------------------------------------------------------------- drift


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    yield tmp_path / "home"


def spark(address: str, sha: str = SHA_A) -> str:
    """A GB10 node's facts: the versions recorded on one, its fabric at `address`."""
    ip = IP_JSON.replace("192.168.100.10", address)
    return GOOD_FACTS + SPARK.replace(SHA_A, sha) + "clock=1767323045.1\n" + f"ip={ip}\n"


def test_must_match_reads_every_node_and_names_the_unreachable(tmp_path: Path, home: Path) -> None:
    c = Cluster(tmp_path)
    recipe, path, _ = c.recipe()
    a, b = answering(spark("10.90.0.1")), answering(spark("10.90.0.2", SHA_B))
    found = must_match(recipe, path, {"node0": a, "node1": b})
    (drift,) = [f for f in found if f.kind == "drift"]
    assert SHA_A in drift.what and SHA_B in drift.what
    assert [len(t.calls) for t in (a, b)] == [1, 1]  # one round trip per node
    # the engine's environment reached the fact: VLLM_NCCL_SO_PATH is its third argument
    recipe, path, _ = c.recipe(engine__env={"VLLM_NCCL_SO_PATH": "/opt/nccl/libnccl.so.2"})
    t = answering(spark("10.90.0.1"))

    def lost(argv: object) -> Result:
        raise DesksideError("cannot connect to 10.90.0.2:22")

    found = must_match(recipe, path, {"node0": t, "node1": FakeTransport(default=lost)})
    assert [(f.kind, f.node, f.severity) for f in found] == [("unreachable", "node1", "problem")]
    assert "cannot connect" in found[0].what
    read = fact_argvs(t.calls[0][1])
    assert read is not None and read[1][0][6] == "/opt/nccl/libnccl.so.2"


def test_deploy_preflight_refuses_on_drift_and_changes_nothing(tmp_path: Path, home: Path) -> None:
    c = Cluster(tmp_path)
    c.head.facts = spark("10.90.0.1")
    c.worker.facts = spark("10.90.0.2", SHA_B)
    report = c.deploy()
    assert not report.ok and report.failed_stage == "preflight"
    assert "node0, node1: NCCL library differs" in (report.error or "")
    assert SHA_A in (report.error or "") and SHA_B in (report.error or "")
    assert "deskside doctor" in (report.hint or "")
    assert not [e for e in c.journal.entries if e[1] in ("put", "spawn")]
    # the versions fact ran inside the preflight's round trip: one round trip per node
    facts_runs = [e for e in c.journal.entries if e[1] == "run" and "uname -r" in " ".join(e[2])]
    assert len(facts_runs) == 2
    assert all("id -u" in " ".join(e[2]) for e in facts_runs)
    # the same build on both: no refusal from the comparison
    c.worker.facts = spark("10.90.0.2")
    assert c.deploy().ok

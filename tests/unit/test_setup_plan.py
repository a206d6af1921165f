"""`deskside setup`'s pure planning (deskside.setup.wanted, .changes, .seen parsers) and
`deskside image`'s (deskside.images.held parser, .check verdicts): hand-written node
answers in, the files, steps and verdicts out."""

from __future__ import annotations

import hashlib
import io
from typing import Any

import pytest
from ruamel.yaml import YAML

from deskside.facts.base import FactError
from deskside.images.check import image_findings, node_verdict
from deskside.images.held import NodeImage, parse_image, split_ref
from deskside.recipe.load import load_recipe_text
from deskside.recipe.types import Recipe
from deskside.records.setup import SetupRecord, Written
from deskside.setup.apply import link_problems
from deskside.setup.changes import node_changes, undo_steps
from deskside.setup.seen import Held, parse_about, parse_held
from deskside.setup.wanted import Options, Seen, node_wants

from ..deploy_cases import ssh_recipe_data

HOST_KEY = "ssh-ed25519 " + "A" * 68
HEAD_KEY = "ssh-ed25519 " + "B" * 68 + " deskside-t@node0"
IMAGE = "registry.example:5000/vllm/vllm-openai:v0.32.0@sha256:" + "a" * 64
ID_A = "sha256:" + "1" * 64
ID_B = "sha256:" + "2" * 64


def recipe(**changes: Any) -> Recipe:
    data = ssh_recipe_data(
        addresses=("192.168.1.10", "192.168.1.11"),
        interfaces=("enp1s0f0np0", "enp1s0f0np0"),
        identity_file="/root/.ssh/id_ed25519",
        root="/var/lib/deskside",
        hf_cache="/var/lib/hf",
        name="t",
    )
    data["cluster"]["nodes"][0]["fabric"]["address"] = "10.0.0.1"
    data["cluster"]["nodes"][1]["fabric"]["address"] = "10.0.0.2"
    for key, value in changes.items():
        data[key] |= value
    out = io.StringIO()
    YAML(typ="safe").dump(data, out)
    return load_recipe_text(out.getvalue(), "t.yaml", base_dir="/tmp")


SEEN = {"node0": Seen("/root", False, HOST_KEY), "node1": Seen("/root", False, HOST_KEY)}


def test_networkd_file_names_the_interface_address_and_mtu() -> None:
    r = recipe()
    w = node_wants(r, r.cluster.nodes[1], SEEN, Options(mtu=9000), HEAD_KEY)
    (f,) = [f for f in w.files if f.path.startswith("/etc/systemd/network/")]
    assert f.path == "/etc/systemd/network/10-deskside-enp1s0f0np0.network"
    assert "Name=enp1s0f0np0\n" in f.text and "MTUBytes=9000\n" in f.text
    assert "Address=10.0.0.2/24\n" in f.text and "RequiredForOnline=no\n" in f.text
    assert w.units == ("systemd-networkd.service",)
    (line,) = w.lines
    assert line.path == "/root/.ssh/authorized_keys"
    assert line.line == "no-agent-forwarding,no-X11-forwarding " + HEAD_KEY


def test_before_the_head_has_its_key_the_line_is_shown_not_planned_to_be_written() -> None:
    r = recipe()
    (line,) = node_wants(r, r.cluster.nodes[1], SEEN, Options(), None).lines
    assert line.line == "no-agent-forwarding,no-X11-forwarding <the key setup makes on node0>"


def test_netplan_where_the_node_keeps_its_network_there() -> None:
    r = recipe()
    seen = {**SEEN, "node1": Seen("/root", True, HOST_KEY)}
    w = node_wants(r, r.cluster.nodes[1], seen, Options(mtu=9000, prefix_length=30), HEAD_KEY)
    (f,) = [f for f in w.files if f.path.startswith("/etc/netplan/")]
    assert f.mode == 0o600 and w.network == "netplan" and w.units == ()
    assert '"enp1s0f0np0":' in f.text and '["10.0.0.2/30"]' in f.text and "mtu: 9000" in f.text


def test_head_pins_the_workers_host_keys_with_agent_forwarding_off() -> None:
    r = recipe()
    w = node_wants(r, r.cluster.nodes[0], SEEN, Options(), None)
    assert w.key is not None and w.key.path == "/root/.ssh/deskside_t_ed25519"
    files = {f.path: f.text for f in w.files}
    known = files["/root/.ssh/deskside_t_known_hosts"]
    assert f"10.0.0.2,192.168.1.11,node1 {HOST_KEY}\n" in known
    config = files["/etc/ssh/ssh_config.d/60-deskside-t.conf"]
    for line in (
        "Host node1 10.0.0.2",
        "HostName 10.0.0.2",
        "StrictHostKeyChecking yes",
        "ForwardAgent no",
        "IdentitiesOnly yes",
        "UserKnownHostsFile /root/.ssh/deskside_t_known_hosts",
    ):
        assert line in config
    assert w.lines == ()


def test_gpu_clock_cap_is_a_unit_enabled_at_boot() -> None:
    r = recipe()
    w = node_wants(r, r.cluster.nodes[1], SEEN, Options(gpu_clock_mhz=2400), HEAD_KEY)
    unit = next(f for f in w.files if f.path.endswith("deskside-gpu-clock.service"))
    assert "--lock-gpu-clocks=0,2400" in unit.text and "WantedBy=multi-user.target" in unit.text
    assert "deskside-gpu-clock.service" in w.units


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_changes_write_keep_rewrite_and_refuse() -> None:
    r = recipe()
    w = node_wants(r, r.cluster.nodes[1], SEEN, Options(), HEAD_KEY)
    net = w.files[0]
    # nothing there: everything is written, the line added, networkd enabled
    c = node_changes(w, Held(), None)
    assert [s.kind for s in c.steps] == ["write", "add-line", "enable"] and not c.problems
    # all as wanted: nothing to do
    done = Held(
        files={net.path: sha(net.text)},
        lines={w.lines[0].path: True},
        units={"systemd-networkd.service": "enabled"},
    )
    assert node_changes(w, done, None).steps == []
    # deskside's own older file: rewritten
    record = SetupRecord(
        recipe="t", node="node1", at="x", written=[Written(path=net.path, sha256=sha("old"))]
    )
    older = Held(files={net.path: sha("old")}, lines=done.lines, units=done.units)
    assert [s.kind for s in node_changes(w, older, record).steps] == ["rewrite"]
    # someone else's, or deskside's changed since: a problem, no step
    for rec in (None, record):
        c = node_changes(w, Held(files={net.path: sha("theirs")}), rec)
        assert net.path not in [s.path for s in c.steps] and len(c.problems) == 1


def test_undo_removes_only_unchanged_files_and_present_lines() -> None:
    record = SetupRecord(
        recipe="t",
        node="node1",
        at="x",
        written=[
            Written(path="/etc/a", sha256=sha("a")),
            Written(path="/etc/b", sha256=sha("b")),
            Written(path="/etc/c", sha256=sha("c")),
            Written(path="/root/.ssh/authorized_keys", kind="line", line="k"),
        ],
        enabled=["systemd-networkd.service"],
    )
    held = Held(
        files={"/etc/a": sha("a"), "/etc/b": sha("edited"), "/etc/c": "absent"},
        lines={"/root/.ssh/authorized_keys": True},
    )
    c = undo_steps(record, held)
    assert [(s.kind, s.path) for s in c.steps] == [
        ("disable", "systemd-networkd.service"),
        ("remove", "/etc/a"),
        ("remove-line", "/root/.ssh/authorized_keys"),
    ]
    assert any("/etc/b: changed since" in k for k in c.kept)
    assert any("/etc/c: already gone" in k for k in c.kept)


def test_seen_parsers() -> None:
    a = parse_about(f"uid=0\nhome=/root\nsystemd=1\nhost_key={HOST_KEY} root@n1\n")
    assert a.uid == 0 and a.home == "/root" and a.systemd and not a.netplan
    assert a.host_key == f"{HOST_KEY} root@n1"
    assert parse_about("uid=0\nhome=/root\nhost_key=ssh-rsa junk\n").host_key is None
    with pytest.raises(FactError):
        parse_about("home=/root\n")
    h = parse_held(
        f"file {'0' * 64} /etc/a\nfile absent /etc/b\nline yes /k\nunit disabled x.service\n"
        f"key {HEAD_KEY}\n"
    )
    assert h.files == {"/etc/a": "0" * 64, "/etc/b": "absent"} and h.lines == {"/k": True}
    assert h.units == {"x.service": "disabled"} and h.public_key == HEAD_KEY
    with pytest.raises(FactError):
        parse_held("surprise x\n")


def test_mixed_up_interfaces_and_addresses_are_problems() -> None:
    node = recipe().cluster.nodes[0]  # 10.0.0.1 on enp1s0f0np0
    a = parse_about(
        "uid=0\nhome=/root\ninterface=lo\ninterface=enp1s0f0np0\ninterface=enp1s0f1np1\n"
        "address=enp1s0f1np1 10.0.0.1/24\naddress=lo 127.0.0.1/8\n"
    )
    assert a.interfaces == ("lo", "enp1s0f0np0", "enp1s0f1np1")
    ((what, fix),) = link_problems(node, a)
    assert what == "10.0.0.1 is already on enp1s0f1np1 of node0, the recipe puts it on enp1s0f0np0"
    assert "ip addr del 10.0.0.1/PREFIX dev enp1s0f1np1" in fix
    missing = parse_about("uid=0\nhome=/root\ninterface=lo\ninterface=eth0\n")
    ((what, _),) = link_problems(node, missing)
    assert what == "no interface enp1s0f0np0 on node0 (it has lo, eth0)"
    right = parse_about(
        "uid=0\nhome=/root\ninterface=enp1s0f0np0\naddress=enp1s0f0np0 10.0.0.1/24\n"
    )
    assert link_problems(node, right) == []


def test_image_reference_and_fact_parser() -> None:
    ref = split_ref(IMAGE)
    assert ref.name == "registry.example:5000/vllm/vllm-openai" and ref.tag == "v0.32.0"
    assert ref.pinned == "registry.example:5000/vllm/vllm-openai@sha256:" + "a" * 64
    assert ref.tagged == "registry.example:5000/vllm/vllm-openai:v0.32.0"
    assert split_ref("registry.example:5000/x@sha256:" + "a" * 64).tag is None
    got = parse_image(f"daemon=28.2.2\nstore=containerd\npinned={ID_A} 123\ntagged={ID_B}\n")
    assert got == NodeImage("28.2.2", "containerd", ID_A, 123, ID_B)
    assert parse_image("daemon=\n").daemon is None
    with pytest.raises(FactError):
        parse_image("daemon=20.10\npinned=latest 1\n")


def test_image_verdicts_and_up_findings() -> None:
    r = recipe(engine={"image": IMAGE}, runtime={"kind": "container", "compose": "docker-compose"})
    head = NodeImage("20.10", pinned=ID_A, tagged=ID_A)
    assert node_verdict(r, "node1", head, NodeImage("20.10", pinned=ID_A)).ok
    differs = node_verdict(r, "node1", head, NodeImage("20.10", tagged=ID_B))
    assert not differs.ok and differs.what == "differs" and "222222222222" in differs.detail
    loaded = node_verdict(r, "node1", head, NodeImage("20.10", tagged=ID_A))
    assert not loaded.ok and "classic image store" in loaded.detail
    assert node_verdict(r, "node1", head, NodeImage("20.10")).what == "missing"
    assert node_verdict(r, "node1", head, NodeImage(None)).what == "no docker"
    findings, notes = image_findings(
        r, {"node0": head, "node1": NodeImage("20.10", tagged=ID_B)}, "t.yaml"
    )
    assert findings == [
        ("node1", f"engine image differs: {differs.detail}", "deskside image sync t.yaml")
    ]
    # the head holds no image: Docker pulls it by digest everywhere, nothing is compared
    findings, notes = image_findings(r, {"node0": NodeImage("20.10"), "node1": head}, "t.yaml")
    assert findings == [] and "pulls it by digest" in notes[0]

"""`deskside setup` on hosts with a real init (tests/nspawn_hosts.py: systemd as PID 1,
sshd, systemd-networkd from Debian's systemd package), two of them joined by a link of
their own (a veth pair between their network namespaces, no address, MTU 1500: the
fabric link as a new machine has it):

- a dry run shows every change (the .network file's text among them) and makes none;
- setup writes the fabric address and MTU 9000 as systemd-networkd files, SSH from the head
  to the worker (key, pinned host key, ssh_config drop-in), records each file, and a
  second run changes nothing;
- after both hosts are powered off, their links stripped to what a cold boot gives (no
  address, MTU 1500) and booted again, systemd-networkd configures the link again and
  `deskside fabric check` passes on it at MTU 9000;
- `setup --undo` removes exactly what setup wrote, except a file changed since.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..cli_process import deskside as run_deskside
from ..deploy_cases import ensure_tiny_model, ssh_recipe_data, write_recipe
from ..nspawn_hosts import NspawnHost, NspawnHosts, can_run, nspawn_hosts

pytestmark = pytest.mark.integration

FABRIC = ("10.77.0.1", "10.77.0.2")
EXPORTER = "deskside-day0-exporter.service"


@dataclass
class Hosts:
    hosts: NspawnHosts
    recipe: Path
    home: Path
    links: tuple[str, str]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_deskside(
            *args, "--known-hosts", str(self.hosts.known_hosts), home=self.home, timeout=300
        )


def link(host: NspawnHost, name: str) -> dict[str, Any]:
    r = subprocess.run(
        ["ip", "netns", "exec", host.name, "ip", "-j", "addr", "show", "dev", name],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(r.stdout)[0]  # type: ignore[no-any-return]


def addresses(host: NspawnHost, name: str) -> list[str]:
    return [
        f"{a['local']}/{a['prefixlen']}"
        for a in link(host, name)["addr_info"]
        if a["family"] == "inet"
    ]


def wait_for(check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout:.0f} s")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    ok, why = can_run()
    if not ok:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("setup-hosts")
    # ping for the fabric check's don't-fragment gate (the same Debian release as the hosts)
    # systemd-networkd runs only with CAP_NET_ADMIN, which a machine of its own has
    binds = ("--bind-ro=/usr/bin/ping", "--capability=CAP_NET_ADMIN")
    with nspawn_hosts(base / "hosts", "s", 2, binds=binds) as hs:
        h0, h1 = hs.hosts
        links = (f"{h0.name}f", f"{h1.name}f")
        subprocess.run(
            [
                "ip",
                "link",
                "add",
                links[0],
                "netns",
                h0.name,
                "type",
                "veth",
                "peer",
                "name",
                links[1],
                "netns",
                h1.name,
            ],
            check=True,
            capture_output=True,
        )
        data = ssh_recipe_data(
            addresses=(h0.address, h1.address),
            interfaces=links,
            identity_file=str(hs.identity_file),
            root="/var/lib/deskside",
            hf_cache="/var/lib/deskside/hf",
            name="day0",
        )
        for node, address in zip(data["cluster"]["nodes"], FABRIC, strict=True):
            node["fabric"]["address"] = address
        data["cluster"]["fabric"]["mtu"] = 9000
        # the exporter (the memory guard with guard.enforce) as a unit on every node
        data["runtime"]["systemd"] = True
        data["monitoring"] = {"enabled": True}
        recipe = write_recipe(base / "recipes", data)
        ensure_tiny_model(base / "recipes")
        yield Hosts(hs, recipe, base / "home", links)


def test_setup_dry_run_apply_idempotent_reboot_undo(hosts: Hosts) -> None:
    h0, h1 = hosts.hosts.hosts
    network = [f"/etc/systemd/network/10-deskside-{name}.network" for name in hosts.links]
    # the head's fabric address on its other port (a multi-NIC host mixed up): refused
    mixed = ["ip", "netns", "exec", h0.name, "ip", "addr", "add", f"{FABRIC[0]}/24", "dev"]
    subprocess.run([*mixed, h0.interface], check=True)
    refused = hosts.cli("setup", str(hosts.recipe), "--dry-run")
    subprocess.run([*mixed[:6], "del", f"{FABRIC[0]}/24", "dev", h0.interface], check=True)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"{FABRIC[0]} is already on {h0.interface} of node0" in refused.stdout
    assert "nothing changed" in refused.stdout
    t0 = time.monotonic()
    dry = hosts.cli("setup", str(hosts.recipe), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"write {network[0]}" in dry.stdout and "MTUBytes=9000" in dry.stdout
    assert f"Address={FABRIC[1]}/24" in dry.stdout
    assert "add-line /root/.ssh/authorized_keys" in dry.stdout
    assert not h0.path(network[0]).exists() and addresses(h0, hosts.links[0]) == []

    done = hosts.cli("setup", str(hosts.recipe), "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["changed"], report
    seconds = time.monotonic() - t0
    for host, name, address, path in zip(
        hosts.hosts.hosts, hosts.links, FABRIC, network, strict=True
    ):
        assert "MTUBytes=9000" in host.path(path).read_text()
        wait_for(
            lambda h=host, n=name, a=address: addresses(h, n) == [f"{a}/24"], f"{address} on {name}"
        )
        assert link(host, name)["mtu"] == 9000
        assert host.run("systemctl", "is-enabled", "systemd-networkd").stdout.strip() == "enabled"
    for host in (h0, h1):
        assert host.run("systemctl", "is-enabled", EXPORTER).stdout.strip() == "enabled"
        drop_in = host.path(f"/etc/systemd/system/{EXPORTER}.d/10-deskside-setup.conf")
        assert "ConditionPathExists=/var/lib/deskside/day0/current/" in drop_in.read_text()
    rendered = hosts.home / "rendered"
    r = run_deskside("render", str(hosts.recipe), "--out", str(rendered), home=hosts.home)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        h1.path(f"/etc/systemd/system/{EXPORTER}").read_bytes()
        == (rendered / "node1" / EXPORTER).read_bytes()
    )
    record = json.loads(h0.path("/var/lib/deskside/day0/setup.json").read_text())
    assert {w["path"] for w in record["written"]} >= {
        network[0],
        "/etc/ssh/ssh_config.d/60-deskside-day0.conf",
    }
    # the head reaches the worker by name, over the fabric, with its own key and pinned host key
    ssh = h0.run("ssh", "-o", "BatchMode=yes", "node1", "hostname", timeout=30)
    assert ssh.returncode == 0 and ssh.stdout.strip() == h1.name, ssh.stderr
    config = h0.path("/etc/ssh/ssh_config.d/60-deskside-day0.conf").read_text()
    assert "ForwardAgent no" in config and "StrictHostKeyChecking yes" in config
    line = [
        x
        for x in h1.path("/root/.ssh/authorized_keys").read_text().splitlines()
        if "deskside-day0" in x
    ]
    assert len(line) == 1 and line[0].startswith("no-agent-forwarding,")

    again = hosts.cli("setup", str(hosts.recipe))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to change" in again.stdout
    assert "write " not in again.stdout and "add-line" not in again.stdout

    # a cold boot: both hosts off, their link as the hardware gives it, then booted
    for host in (h0, h1):
        host.poweroff()
    for host, name in zip((h0, h1), hosts.links, strict=True):
        for cmd in (
            ["ip", "addr", "flush", "dev", name],
            ["ip", "link", "set", name, "down", "mtu", "1500"],
        ):
            subprocess.run(["ip", "netns", "exec", host.name, *cmd], check=True)
        assert addresses(host, name) == [] and link(host, name)["mtu"] == 1500
    t1 = time.monotonic()
    for host in (h0, h1):
        host.boot()
    for host, name, address in zip((h0, h1), hosts.links, FABRIC, strict=True):
        wait_for(
            lambda h=host, n=name, a=address: addresses(h, n) == [f"{a}/24"],
            f"{address} after boot",
        )
    for host in (h0, h1):  # enabled, and waiting for a release instead of failing
        state = host.run("systemctl", "show", "--property=ActiveState,ConditionResult", EXPORTER)
        assert "ActiveState=inactive" in state.stdout and "ConditionResult=no" in state.stdout
    check = hosts.cli("fabric", "check", str(hosts.recipe), "--no-bandwidth", "--json")
    assert check.returncode == 0, check.stdout + check.stderr
    gates = json.loads(check.stdout)["gates"]
    mtu = [g for g in gates if g["gate"] == "mtu"]
    assert mtu and all(g["status"] == "pass" for g in mtu), mtu
    assert "9000" in json.dumps(mtu)
    pings = [g for g in gates if g["gate"] == "ping"]
    assert pings and all(g["status"] == "pass" for g in pings), pings
    print(f"\nsetup {seconds:.1f} s; boot to a passing fabric check {time.monotonic() - t1:.1f} s")

    # undo: what setup wrote goes, except the drop-in changed since
    drop_in = h0.path("/etc/ssh/ssh_config.d/60-deskside-day0.conf")
    drop_in.write_text(drop_in.read_text() + "# changed by hand\n")
    undone = hosts.cli("setup", str(hosts.recipe), "--undo", "--yes")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert "changed since deskside wrote it" in undone.stdout
    assert drop_in.exists()
    for host, path in zip((h0, h1), network, strict=True):
        assert not host.path(path).exists()
        assert not host.path("/var/lib/deskside/day0/setup.json").exists()
        assert host.run("systemctl", "is-enabled", "systemd-networkd").stdout.strip() != "enabled"
        assert not host.path(f"/etc/systemd/system/{EXPORTER}").exists()
    assert "deskside-day0" not in h1.path("/root/.ssh/authorized_keys").read_text()
    assert not h0.path("/root/.ssh/deskside_day0_ed25519").exists()
    nothing = hosts.cli("setup", str(hosts.recipe), "--undo", "--yes")
    assert nothing.returncode == 0 and "nothing to undo" in nothing.stdout

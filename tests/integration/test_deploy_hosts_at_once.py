"""The deploy's executor over real SSH (two network-namespace hosts with their own sshd,
`tests/sshd_hosts.py`): each host's operations run in a thread of their own, through one
SshTransport per host sharing deskside's SSH event loop. The hosts meet in the middle of
their operations (each waits for a file the other writes), which only works when both
run at once; a failure on one host names it and its operation and keeps what the other
did.

Needs root, iproute2 and openssh-server (scripts/system-deps installs them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deskside.runtime.ops import Executed, NodesFailed, Put, Run, at_once, execute_waves
from deskside.transport import ssh
from deskside.transport.ssh import SshTarget, SshTransport

from ..sshd_hosts import SshHosts, can_run, ssh_hosts

pytestmark = pytest.mark.integration

# touch my file, then wait (5 s at most) for the other host's
MEET = (
    'touch -- "$1/$2"; i=0; '
    'while [ ! -e "$1/$3" ]; do i=$((i+1)); [ $i -gt 100 ] && exit 9; sleep 0.05; done'
)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    ok, why = can_run()
    if not ok:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("deploy-at-once")
    with ssh_hosts(base / "hosts", "a", 2, base / "root") as made:
        yield made
    ssh.close_all()


def _transports(hosts: SshHosts) -> dict[str, SshTransport]:
    return {
        f"node{i}": SshTransport(
            SshTarget(h.address, 22, "root", str(hosts.identity_file), str(hosts.known_hosts))
        )
        for i, h in enumerate(hosts.hosts)
    }


def test_hosts_run_their_operations_at_once(hosts: SshHosts, tmp_path: Path) -> None:
    ts = _transports(hosts)
    meet = tmp_path / "meet"  # outside the private root: both hosts see it
    meet.mkdir()
    root = hosts.private_root
    waves = [
        [
            op
            for i, node in enumerate(ts)
            for op in (
                Put(node, f"{root}/release/{node}.txt", node.encode(), 0o640, "pushing"),
                Run(node, ("sh", "-c", MEET, "sh", str(meet), node, f"node{1 - i}"), "meeting"),
            )
        ],
        [Run(node, ("test", "-f", f"{root}/release/{node}.txt"), "checking") for node in ts],
    ]
    done = execute_waves(waves, ts, Executed())
    assert done.done == [op for wave in waves for op in wave]
    for i, h in enumerate(hosts.hosts):
        assert (h.private_dir / "release" / f"node{i}.txt").read_bytes() == f"node{i}".encode()
    assert at_once(ts, lambda n: ts[n].run(["cat", f"{root}/release/{n}.txt"]).stdout) == {
        "node0": "node0",
        "node1": "node1",
    }


def test_a_failing_host_is_named_and_the_other_keeps_its_work(hosts: SshHosts) -> None:
    ts = _transports(hosts)
    root = hosts.private_root
    wave = [
        Put("node0", f"{root}/kept.txt", b"kept", 0o644, "pushing"),
        Run("node1", ("sh", "-c", "echo no room >&2; exit 4"), "committing the release folder"),
    ]
    done = Executed()
    with pytest.raises(NodesFailed) as caught:
        execute_waves([wave], ts, done)
    assert caught.value.message == ("node1: committing the release folder failed (exit 4): no room")
    assert done.done == [wave[0]]
    assert (hosts.hosts[0].private_dir / "kept.txt").read_bytes() == b"kept"

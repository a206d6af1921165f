"""SshTransport against real sshd hosts (network namespaces, `tests/sshd_hosts.py`):
commands, detached spawns that are session leaders, atomic puts with modes, gets, one
reused connection per host, and refusals: an unknown host key, a wrong client key.

Needs root, iproute2 and openssh-server (scripts/system-deps installs them)."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deskside.safefs import WriteRefused, folder_files
from deskside.transport import ssh
from deskside.transport.ssh import SshError, SshTarget, SshTransport

from .. import procs
from ..sshd_hosts import SshHosts, can_run, ssh_hosts

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHosts]:
    ok, why = can_run()
    if not ok:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("ssh-transport")
    with ssh_hosts(base / "hosts", "t", 1, base / "root") as made:
        yield made
    ssh.close_all()


def transport(hosts: SshHosts, **changes: object) -> SshTransport:
    host = hosts.hosts[0]
    fields: dict[str, object] = {
        "host": host.address,
        "identity_file": str(hosts.identity_file),
        "known_hosts": str(hosts.known_hosts),
    }
    fields.update(changes)
    return SshTransport(SshTarget(**fields))  # type: ignore[arg-type]


def test_run_quotes_env_input_and_exit_codes(hosts: SshHosts) -> None:
    t = transport(hosts)
    r = t.run(["printf", "%s|", "a b", "$(touch /tmp/pwned)", "it's"])
    assert r.ok and r.stdout == "a b|$(touch /tmp/pwned)|it's|"
    assert t.run(["sh", "-c", 'printf %s "$X"'], env={"X": "x y;z"}).stdout == "x y;z"
    assert t.run(["cat"], input="hello\n").stdout == "hello\n"
    assert t.run(["sh", "-c", "echo oops >&2; exit 3"]) == ssh.Result(3, "", "oops\n")
    assert t.run(["no-such-program-deskside"]).rc == 127
    t0 = time.monotonic()
    assert t.run(["sleep", "30"], timeout=1).rc == 124
    assert time.monotonic() - t0 < 10
    ip = t.run(["ip", "-br", "addr"]).stdout
    assert hosts.hosts[0].address in ip  # it ran inside the host's namespace


def test_one_connection_per_host_is_reused(hosts: SshHosts) -> None:
    t = transport(hosts)
    t.run(["true"])
    conns = dict(ssh.POOL._conns)
    for _ in range(5):
        assert transport(hosts).run(["true"]).ok
    assert ssh.POOL._conns == conns  # the same connection objects


def test_a_dropped_connection_is_an_ssh_error_and_the_next_call_reconnects(
    hosts: SshHosts,
) -> None:
    t = transport(hosts)
    assert t.run(["true"]).ok
    # kill this connection's sshd process: the connection drops mid-command
    try:
        r = t.run(["sh", "-c", "kill -9 $PPID; sleep 5"], timeout=20)
        assert not r.ok
    except SshError as exc:
        assert "connection lost" in exc.message
    for _ in range(2):
        try:
            assert t.run(["echo", "back"]).stdout == "back\n"
            break
        except SshError as exc:
            assert "connection lost" in exc.message
    else:
        raise AssertionError("no reconnect")


def test_spawn_detaches_a_session_leader(hosts: SshHosts) -> None:
    t = transport(hosts)
    log = f"{hosts.private_root}/spawn/out.log"
    pid = t.spawn(
        ["sh", "-c", 'echo "started $GREETING"; sleep 0 & sleep 60'],
        env={"GREETING": "hi there"},
        log_path=log,
        cwd="/",
    )
    try:
        info = procs.read_proc(pid)  # same pid namespace: visible from here
        assert info is not None and info.sid == pid  # the session leader
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and b"started" not in _get(t, log):
            time.sleep(0.1)
        assert _get(t, log) == b"started hi there\n"
    finally:
        assert procs.stop_session(pid, grace=5)


def _get(t: SshTransport, path: str) -> bytes:
    try:
        return t.get(path)
    except FileNotFoundError:
        return b""


def test_put_is_atomic_with_mode_and_get_reads_back(hosts: SshHosts) -> None:
    t = transport(hosts)
    target = f"{hosts.private_root}/files/deep/secret"
    t.put(b"one\n", target, 0o600)
    t.put(b"two\n", target, 0o600)
    assert t.get(target) == b"two\n"
    local = hosts.hosts[0].private_dir / "files" / "deep" / "secret"
    assert stat.S_IMODE(local.stat().st_mode) == 0o600
    assert os.listdir(local.parent) == ["secret"]  # no temporary file left behind
    t.put(b"#!/bin/sh\n", f"{hosts.private_root}/files/run.sh", 0o755)
    assert os.access(local.parent.parent / "run.sh", os.X_OK)
    with pytest.raises(FileNotFoundError):
        t.get(f"{hosts.private_root}/files/absent")
    src = hosts.hosts[0].private_dir.parent / "blob.bin"
    src.write_bytes(os.urandom(300_000))
    t.put_file(src, f"{hosts.private_root}/files/blob.bin", 0o640)
    assert t.get(f"{hosts.private_root}/files/blob.bin") == src.read_bytes()


def test_a_model_folder_with_links_pushed_over_sftp_changes_no_mode_on_the_node(
    hosts: SshHosts, tmp_path: Path
) -> None:
    """A model folder holding a link (to a file inside it) is pushed file by file as the
    deploy does, to a node folder where a link to a private file of the node waits at every
    name: the links are replaced, the private file keeps its mode and contents."""
    t = transport(hosts)
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "sub" / "weights.bin").write_bytes(os.urandom(70_000))
    (model / "tokenizer.bin").symlink_to("sub/weights.bin")
    local = hosts.hosts[0].private_dir
    victim = local / "victim" / "secret"
    victim.parent.mkdir(parents=True)
    victim.write_text("the node's own\n")
    victim.chmod(0o600)
    node_victim = f"{hosts.private_root}/victim/secret"
    (local / "pushed" / "sub").mkdir(parents=True)
    names = [rel for rel, _ in folder_files(model)]
    assert names == ["config.json", "sub/weights.bin", "tokenizer.bin"]
    for rel in names:
        (local / "pushed" / rel).symlink_to(node_victim)
    for rel, source in folder_files(model):
        t.put_file(source, f"{hosts.private_root}/pushed/{rel}", 0o644)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert victim.read_text() == "the node's own\n"
    for rel in names:
        path = local / "pushed" / rel
        assert not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) == 0o644, rel
    assert (local / "pushed" / "tokenizer.bin").read_bytes() == (
        model / "sub" / "weights.bin"
    ).read_bytes()
    # a link leading out of the folder is refused before anything is pushed
    (model / "leak").symlink_to(victim)
    with pytest.raises(WriteRefused, match="outside the folder"):
        folder_files(model)


def test_unknown_host_key_is_refused(hosts: SshHosts, tmp_path: Path) -> None:
    other = tmp_path / "known_hosts"
    wrong = tmp_path / "wrong"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f {wrong}")
    kind, key = wrong.with_suffix(".pub").read_text().split()[:2]
    other.write_text(f"{hosts.hosts[0].address} {kind} {key}\n")
    with pytest.raises(SshError, match="host key not verified") as caught:
        transport(hosts, known_hosts=str(other)).run(["true"])
    assert "ssh-keyscan" in (caught.value.hint or "")
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(SshError, match="host key not verified"):
        transport(hosts, known_hosts=str(empty)).run(["true"])
    with pytest.raises(SshError, match="no known_hosts file"):
        transport(hosts, known_hosts=str(tmp_path / "missing")).run(["true"])


def test_unauthorized_key_is_refused(hosts: SshHosts, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f {stranger}")
    with pytest.raises(SshError, match="permission denied") as caught:
        transport(hosts, identity_file=str(stranger)).run(["true"])
    assert "public keys only" in (caught.value.hint or "")


def test_a_changed_host_key_is_told_apart_from_an_unknown_host(
    hosts: SshHosts, tmp_path: Path
) -> None:
    address = hosts.hosts[0].address
    other = tmp_path / "other"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f {other}")
    kind, key = other.with_suffix(".pub").read_text().split()[:2]
    changed = tmp_path / "changed_known_hosts"
    changed.write_text(f"{address} {kind} {key}\n")
    with pytest.raises(SshError, match="host key CHANGED") as caught:
        transport(hosts, known_hosts=str(changed)).run(["true"])
    assert "intercepting" in caught.value.message
    assert "SHA256:" in caught.value.message  # the fingerprint the server presented
    hint = caught.value.hint or ""
    assert f"ssh-keygen -R {address} -f {changed}" in hint
    assert "ssh-keygen -lf" in hint and "do not connect" in hint
    unknown = tmp_path / "unknown_known_hosts"
    unknown.write_text("")
    with pytest.raises(SshError, match="unknown host") as caught:
        transport(hosts, known_hosts=str(unknown)).run(["true"])
    assert "CHANGED" not in caught.value.message
    assert "ssh-keygen -R" not in (caught.value.hint or "")
    assert "ssh-keyscan" in (caught.value.hint or "")


def test_the_agent_is_never_forwarded_whatever_ssh_config_says(
    hosts: SshHosts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sock.exists()
        home = tmp_path / "home"
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "config").write_text("Host *\n  ForwardAgent yes\n")
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        ssh.close_all()  # a new connection, made with the agent in the environment
        r = transport(hosts).run(["sh", "-c", 'printf "%s" "${SSH_AUTH_SOCK-unset}"'])
        assert r.ok and r.stdout == "unset"
    finally:
        ssh.close_all()
        agent.terminate()
        agent.wait(timeout=10)

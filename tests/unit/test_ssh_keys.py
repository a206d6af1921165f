"""Private key files are checked the way OpenSSH checks them (`sshkey_perm_ok`), and an
unknown host reads differently from a changed host key."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh
import pytest

from deskside.transport import ssh
from deskside.transport.ssh import SshError, SshTarget, SshTransport
from deskside.transport.ssh_keys import (
    host_key_refusal,
    key_file_refusal,
    key_files,
    known_hosts_entry,
)


def _key(tmp_path: Path, mode: int) -> Path:
    path = tmp_path / "id_ed25519"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(path))
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_a_key_only_its_owner_can_use_is_accepted(tmp_path: Path, mode: int) -> None:
    assert key_file_refusal(_key(tmp_path, mode)) is None


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606, 0o666, 0o610, 0o601])
def test_a_key_others_can_read_or_write_is_refused_like_openssh(tmp_path: Path, mode: int) -> None:
    path = _key(tmp_path, mode)
    refusal = key_file_refusal(path)
    assert refusal is not None
    message, hint = refusal
    assert "UNPROTECTED PRIVATE KEY FILE" in message
    assert str(path) in message and f"{mode:04o}" in message
    assert hint == f"chmod 600 {path}"


def test_a_key_path_that_is_not_a_key_file_is_refused(tmp_path: Path) -> None:
    assert "not found" in (key_file_refusal(tmp_path / "absent") or ("", ""))[0]
    os.mkfifo(tmp_path / "fifo")
    assert "not a regular file" in (key_file_refusal(tmp_path / "fifo") or ("", ""))[0]
    assert "not a regular file" in (key_file_refusal(tmp_path) or ("", ""))[0]
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(3 << 20)
    big.chmod(0o600)
    assert "not a private key" in (key_file_refusal(big) or ("", ""))[0]


def test_the_key_files_tried_are_the_recipes_then_the_configs_then_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_rsa").write_text("k")
    assert key_files("~/mine") == [tmp_path / "mine"]
    assert key_files(None, [str(tmp_path / ".ssh" / "id_rsa"), "/absent"]) == [
        tmp_path / ".ssh" / "id_rsa"
    ]
    assert key_files(None) == [tmp_path / ".ssh" / "id_rsa"]


def test_an_unprotected_identity_file_is_refused_before_connecting(tmp_path: Path) -> None:
    path = _key(tmp_path, 0o644)
    known = tmp_path / "known_hosts"
    known.write_text("")
    # port 9 of a TEST-NET address: the refusal comes first, no connection is tried
    target = SshTarget(host="192.0.2.1", port=9, identity_file=str(path), known_hosts=str(known))
    with pytest.raises(SshError, match="UNPROTECTED PRIVATE KEY FILE") as caught:
        SshTransport(target).run(["true"])
    assert caught.value.hint == f"chmod 600 {path}"
    ssh.close_all()


def test_unknown_and_changed_host_keys_read_differently(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    unknown, unknown_hint = host_key_refusal("10.0.0.5", 22, known, "not trusted", None)
    assert "unknown host" in unknown and "CHANGED" not in unknown
    assert "ssh-keyscan -p 22 10.0.0.5" in unknown_hint and "ssh-keygen -R" not in unknown_hint
    old = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    known.write_text(f"[10.0.0.5]:2222 {old}")
    changed, changed_hint = host_key_refusal("10.0.0.5", 2222, known, "not trusted", None)
    assert "CHANGED" in changed and "intercepting" in changed
    assert f"ssh-keygen -R '[10.0.0.5]:2222' -f {known}" in changed_hint
    assert "ssh-keygen -lf" in changed_hint and changed_hint != unknown_hint
    revoked, _ = host_key_refusal("10.0.0.5", 22, known, "Host key is revoked", None)
    assert "@revoked" in revoked
    assert known_hosts_entry("h", 22) == "h" and known_hosts_entry("h", 2) == "[h]:2"

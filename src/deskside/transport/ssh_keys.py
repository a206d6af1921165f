"""The key files and host keys of an SSH connection, checked the way OpenSSH checks them.

- `key_file_refusal`: a private key file others may read or write is refused
  ("UNPROTECTED PRIVATE KEY FILE", OpenSSH's `sshkey_perm_ok`), and so is anything that
  is not a regular file of key size.
- `HostKeySeen` records the key a server presented when known_hosts did not trust it, and
  `host_key_refusal` tells an unknown host (no key for it in known_hosts) from a changed
  key (a different key for it: possibly someone in the middle), each with its own hint.

Both return the message and the hint; `deskside.transport.ssh` raises them as SshError.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import stat
import warnings
from collections.abc import Sequence
from pathlib import Path

with warnings.catch_warnings():
    # cryptography warns, as asyncssh loads, that DSA keys are deprecated: a library's notice
    # printed on every command otherwise, and nothing the user can act on
    warnings.simplefilter("ignore", UserWarning)
    import asyncssh

# The private keys OpenSSH (and asyncssh) try when none is named, in ~/.ssh.
DEFAULT_KEY_NAMES = (
    "id_ed25519_sk",
    "id_ecdsa_sk",
    "id_ed448",
    "id_ed25519",
    "id_ecdsa",
    "id_rsa",
    "id_dsa",
)
MAX_KEY_BYTES = 1 << 20  # a private key is a few KiB; a certificate-bearing one, more
NODE_HOST_KEY = "/etc/ssh/ssh_host_ed25519_key.pub"


def key_files(identity_file: str | None, config_files: Sequence[str] = ()) -> list[Path]:
    """The private key files a connection may use: the recipe's one, else the config's
    IdentityFile entries, else the default key files that exist."""
    if identity_file:
        return [Path(identity_file).expanduser()]
    if config_files:
        return [Path(f).expanduser() for f in config_files if Path(f).expanduser().exists()]
    home = Path("~", ".ssh").expanduser()
    return [home / name for name in DEFAULT_KEY_NAMES if (home / name).exists()]


def key_file_refusal(path: Path) -> tuple[str, str] | None:
    """(message, hint) when `path` must not be used as a private key, else None."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return f"identity file {path} not found", "give the path of a private key file"
    except OSError as exc:
        return f"identity file {path}: {exc.strerror}", "give the path of a private key file"
    if not stat.S_ISREG(st.st_mode):
        return (
            f"identity file {path} is not a regular file",
            "give the path of a private key file",
        )
    if st.st_size > MAX_KEY_BYTES:
        return (
            f"identity file {path} is {st.st_size:,} bytes: not a private key",
            "give the path of a private key file (a few KiB)",
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return (
            f"UNPROTECTED PRIVATE KEY FILE: {path} has mode {mode:04o}; a private key that "
            "others can read or write is refused (as OpenSSH refuses it)",
            f"chmod 600 {shlex.quote(str(path))}",
        )
    return None


class HostKeySeen(asyncssh.SSHClient):
    """Remembers the host key a server presented when known_hosts did not trust it."""

    def __init__(self) -> None:
        self.key: asyncssh.SSHKey | None = None
        self.addr = ""

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        self.key, self.addr = key, addr
        return False  # never trusted here: only known_hosts decides


def known_hosts_entry(host: str, port: int) -> str:
    """How known_hosts (and `ssh-keygen -R`) names the host: `host`, or `[host]:port`."""
    return host if port == 22 else f"[{host}]:{port}"


def _keys_on_record(known: Path, host: str, addr: str, port: int) -> bool:
    """Whether `known` holds any key (or CA key) for the host."""
    with contextlib.suppress(OSError, ValueError, UnicodeDecodeError):
        matched = asyncssh.read_known_hosts(str(known)).match(host, addr, port)
        return bool(matched[0] or matched[1])
    return False


def host_key_refusal(
    host: str, port: int, known: Path, reason: str, seen: HostKeySeen | None
) -> tuple[str, str]:
    """(message, hint) for a host key known_hosts does not trust: unknown, changed or
    revoked."""
    entry = known_hosts_entry(host, port)
    fingerprint = seen.key.get_fingerprint() if seen and seen.key else None
    presents = f"it presents {fingerprint}" if fingerprint else "its key could not be read"
    on_node = (
        f"on the node itself (its console, not over this network) print its key's "
        f"fingerprint: ssh-keygen -lf {NODE_HOST_KEY}"
    )
    add = f"ssh-keyscan -p {port} {shlex.quote(host)} >> {shlex.quote(str(known))}"
    if "revoked" in reason.lower():
        return (
            f"host key not verified: the key {entry} presents is marked @revoked in {known}",
            "do not connect: a revoked key is one its owner withdrew; ask whoever runs the node",
        )
    if _keys_on_record(known, host, seen.addr if seen else "", port):
        return (
            f"host key not verified: the host key CHANGED. {known} holds a different key "
            f"for {entry}, and {presents}. Someone may be intercepting the connection "
            "(or the node was reinstalled and made new host keys)",
            f"do not connect until you know why. {on_node}; only if it matches "
            f"{fingerprint or 'the key presented'}, remove the old line: ssh-keygen -R "
            f"{shlex.quote(entry)} -f {shlex.quote(str(known))}, then add the new key: {add}",
        )
    return (
        f"host key not verified: {entry} is an unknown host ({known} has no key for it); "
        f"{presents}",
        f"{on_node}; if it matches, add the key: {add}",
    )


def config_identity_files(options: asyncssh.SSHClientConnectionOptions) -> list[str]:
    """The IdentityFile entries ~/.ssh/config gives for the host (empty when none)."""
    config = getattr(options, "config", None)
    files = config.get("IdentityFile") if config is not None else None
    if not isinstance(files, list | tuple):
        return []
    return [os.fspath(f) for f in files if isinstance(f, str | os.PathLike)]

"""A node reached over SSH (asyncssh), behind the synchronous Transport API.

- Authentication: public keys only, from the recipe's `ssh.identity_file` or the SSH agent
  and the default key files. Password, keyboard-interactive, host-based and GSSAPI
  authentication are switched off: recipes never hold passwords. A private key file that
  others may read or write (any of the mode bits 077) is refused before connecting, as
  OpenSSH refuses it ("UNPROTECTED PRIVATE KEY FILE"), with the `chmod 600` that fixes it.
- Host keys are always verified against a known_hosts file (`known_hosts`, default
  `~/.ssh/known_hosts`); there is no option to skip verification. An unknown host and a
  changed key are told apart: a known_hosts file holding a *different* key for the host
  means the connection may be intercepted, and the hint says how to check the fingerprint
  on the node itself before replacing the line (`ssh-keygen -R`).
- Nothing is forwarded, ever: no agent forwarding, no X11, no environment (SetEnv,
  SendEnv), no GSSAPI credential delegation, no pty, no remote command but deskside's own.
  deskside sets these itself, so ~/.ssh/config cannot turn them on.
- What ~/.ssh/config (when readable) still supplies, for the host as the recipe names it:
  HostName, ProxyJump / ProxyCommand, HostKeyAlias, the algorithms, and, when the recipe
  has no `ssh.identity_file`, IdentityFile, IdentitiesOnly, IdentityAgent and
  CertificateFile. The user, port, known_hosts file, timeouts and authentication methods
  are the recipe's and deskside's, whatever the config says.
- One connection per (user, host, port, key, known_hosts), reused by every transport of
  the process; commands and SFTP run as channels on it.
- asyncssh runs on a private event loop in a daemon thread; each call blocks until its
  coroutine is done.

`run` sends `argv` quoted for POSIX sh (the login shell runs it); `env` is given with
`env NAME=VALUE ...` (sshd drops most environment requests). `spawn` detaches with
`setsid` and the new session leader prints its own pid before it execs the program, so a
whole engine (with its worker processes) stops by session (see `deskside.runtime.node_sh`).
`put` creates a temporary file next to the target exclusively, with its final mode, and
renames it over the target (SFTP posix-rename: atomic; a link at the target is replaced); no
chmod goes through a name. `get` reads over SFTP.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import shlex
import threading
import uuid
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

with warnings.catch_warnings():
    # cryptography warns, as asyncssh loads, that DSA keys are deprecated: a library's notice
    # printed on every command otherwise, and nothing the user can act on
    warnings.simplefilter("ignore", UserWarning)
    import asyncssh

from deskside.errors import DesksideError
from deskside.safefs import open_source
from deskside.transport.base import Result, SshError
from deskside.transport.ssh_keys import (
    HostKeySeen,
    config_identity_files,
    host_key_refusal,
    key_file_refusal,
    key_files,
)

T = TypeVar("T")

CONNECT_TIMEOUT = 15.0
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


@dataclass(frozen=True)
class SshTarget:
    """Where and as whom to connect."""

    host: str
    port: int = 22
    user: str = "root"
    identity_file: str | None = None
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts

    @property
    def label(self) -> str:
        port = "" if self.port == 22 else f":{self.port}"
        return f"{self.user}@{self.host}{port}"

    def known_hosts_path(self) -> Path:
        return Path(self.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()


class _Loop:
    """A private asyncio loop in a daemon thread (started on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="deskside-ssh", daemon=True).start()
                self._loop = loop
            return self._loop

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop())
        return future.result(timeout)


_LOOP = _Loop()


class SshPool:
    """Open connections, one per target; reconnects when a connection was closed."""

    def __init__(self) -> None:
        self._conns: dict[SshTarget, asyncssh.SSHClientConnection] = {}
        self._locks: dict[SshTarget, asyncio.Lock] = {}

    async def connection(self, target: SshTarget) -> asyncssh.SSHClientConnection:
        lock = self._locks.setdefault(target, asyncio.Lock())
        async with lock:
            conn = self._conns.get(target)
            if conn is not None and not conn.is_closed():
                return conn
            conn = await _connect(target)
            self._conns[target] = conn
            return conn

    async def forget(self, target: SshTarget) -> None:
        conn = self._conns.pop(target, None)
        if conn is not None:
            conn.close()
            await conn.wait_closed()

    async def close_all(self) -> None:
        for target in list(self._conns):
            await self.forget(target)


POOL = SshPool()


def close_all() -> None:
    """Close every pooled connection (at exit, or between tests)."""
    if _LOOP._loop is not None and not _LOOP._loop.is_closed():
        with contextlib.suppress(Exception):
            _LOOP.call(POOL.close_all(), timeout=10)


atexit.register(close_all)


def _auth_hint(target: SshTarget) -> str:
    key = target.identity_file or "your SSH agent or ~/.ssh/id_*"
    return (
        f"deskside logs in with public keys only ({key}); authorize the key on the node: "
        f"ssh-copy-id -p {target.port} {target.label}"
    )


async def _connect(target: SshTarget) -> asyncssh.SSHClientConnection:
    known = target.known_hosts_path()
    if not known.is_file():
        raise SshError(
            f"{target.label}: no known_hosts file {known} to verify the host key against",
            hint="deskside verifies host keys against a known_hosts file; check the node's "
            "key fingerprint on the node itself, then add it: ssh-keyscan -p "
            f"{target.port} {target.host} >> {known}",
        )
    if target.identity_file:  # before asyncssh reads it
        _refuse_key_files(target, key_files(target.identity_file))
    settings: dict[str, Any] = {
        "host": target.host,
        "port": target.port,
        "username": target.user,
        # always a path: asyncssh skips verification when known_hosts is None
        "known_hosts": str(known),
        "password_auth": False,
        "kbdint_auth": False,
        "host_based_auth": False,
        "gss_auth": False,
        "gss_kex": False,
        "preferred_auth": "publickey",
        "connect_timeout": CONNECT_TIMEOUT,
        "keepalive_interval": 30,
        # nothing forwarded, whatever ~/.ssh/config says (ForwardAgent, ForwardX11Trusted,
        # SetEnv, SendEnv, RemoteCommand, RequestTTY, GSSAPIDelegateCredentials)
        "agent_forwarding": False,
        "x11_forwarding": False,
        "env": None,
        "send_env": None,
        "command": None,
        "request_pty": False,
        "gss_delegate_creds": False,
    }
    if target.identity_file:
        settings["client_keys"] = [str(Path(target.identity_file).expanduser())]
    seen = HostKeySeen()
    try:
        options = await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(asyncssh.SSHClientConnectionOptions, **settings)
        )
        if not target.identity_file:  # the config's or the default key files
            _refuse_key_files(target, key_files(None, config_identity_files(options)))
        return await asyncssh.connect(
            target.host, target.port, options=options, client_factory=lambda: seen
        )
    except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
        raise SshError(
            f"{target.label}: cannot use identity file {target.identity_file} ({exc})",
            hint="give an unencrypted private key, or load the key into your SSH agent "
            "(ssh-add) and leave ssh.identity_file out",
        ) from None
    except asyncssh.HostKeyNotVerifiable as exc:
        message, hint = host_key_refusal(target.host, target.port, known, exc.reason, seen)
        raise SshError(f"{target.label}: {message}", hint) from None
    except asyncssh.PermissionDenied:
        raise SshError(f"{target.label}: permission denied", _auth_hint(target)) from None
    except asyncssh.DisconnectError as exc:
        raise SshError(f"{target.label}: disconnected ({exc.reason})") from None
    except (OSError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        raise SshError(
            f"{target.label}: unreachable ({reason})",
            hint="check the node's address and ssh.port in the recipe, and that sshd runs",
        ) from None


def _refuse_key_files(target: SshTarget, files: list[Path]) -> None:
    for path in files:
        refusal = key_file_refusal(path)
        if refusal is not None:
            raise SshError(f"{target.label}: {refusal[0]}", refusal[1])


def shell_command(
    argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None
) -> str:
    """`argv` as one POSIX sh command line (env and cwd applied), every word quoted."""
    words = [shlex.quote(a) for a in argv]
    if env:
        words = ["env", "--", *(shlex.quote(f"{k}={v}") for k, v in env.items()), *words]
    line = " ".join(words)
    if cwd is not None:
        line = f"cd {shlex.quote(cwd)} && {line}"
    return line


def spawn_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    log_path: str,
    cwd: str | None,
) -> str:
    """Start `argv` detached in a new session, output appended to `log_path`; print its pid.

    The pid is printed by the new session leader itself (`echo $$` after `setsid`), so when
    the command returns the process already leads its session: no window in which a stop
    by session would miss it. The leader then `exec`s the program, keeping that pid."""
    log = shlex.quote(log_path)
    parent = shlex.quote(str(PurePosixPath(log_path).parent))
    prefix = f"mkdir -p -- {parent} || exit 1; "
    if cwd is not None:
        prefix += f"cd -- {shlex.quote(cwd)} || exit 1; "
    body = shell_command(argv, env)
    leader = shlex.quote('l=$1; shift; echo $$; exec nohup "$@" >>"$l" 2>&1 </dev/null')
    return f"{prefix}(setsid sh -c {leader} deskside-spawn {log} {body} </dev/null &)"


class SshTransport:
    """One node over SSH (see the module docstring)."""

    def __init__(self, target: SshTarget, pool: SshPool | None = None) -> None:
        self.target = target
        self.pool = pool or POOL

    @property
    def name(self) -> str:
        return self.target.label

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the SSH loop. A dropped connection becomes an SshError (and is
        forgotten, so the next call reconnects); FileNotFoundError passes through."""
        try:
            return _LOOP.call(coro, timeout)
        except (FileNotFoundError, DesksideError):
            raise
        except concurrent.futures.TimeoutError:
            self._forget()
            raise SshError(f"{self.name}: no answer within {timeout:.0f} s") from None
        except (asyncssh.Error, OSError) as exc:
            if isinstance(exc, asyncssh.SFTPError):
                raise
            self._forget()
            reason = getattr(exc, "reason", "") or str(exc) or type(exc).__name__
            raise SshError(
                f"{self.name}: connection lost ({reason})",
                hint="check that the node is up and sshd runs, then run the command again",
            ) from None

    def _forget(self) -> None:
        with contextlib.suppress(Exception):
            _LOOP.call(self.pool.forget(self.target), timeout=10)

    async def _conn(self) -> asyncssh.SSHClientConnection:
        return await self.pool.connection(self.target)

    # -- commands

    async def _run(self, command: str, timeout: float | None, input: str | None) -> Result:
        conn = await self._conn()
        try:
            done = await conn.run(
                command, input=input, timeout=timeout, check=False, errors="replace"
            )
        except asyncssh.TimeoutError as exc:
            out = exc.stdout if isinstance(exc.stdout, str) else ""
            return Result(124, out, f"timed out after {timeout} s")
        except asyncssh.ChannelOpenError as exc:
            await self.pool.forget(self.target)
            raise SshError(f"{self.name}: cannot open a session ({exc.reason})") from None
        rc = done.exit_status
        if rc is None or rc < 0:
            rc = 255  # killed by a signal, or the connection dropped
        stdout = done.stdout if isinstance(done.stdout, str) else ""
        stderr = done.stderr if isinstance(done.stderr, str) else ""
        return Result(rc, stdout, stderr)

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        input: str | None = None,
    ) -> Result:
        command = shell_command(argv, env)
        outer = None if timeout is None else timeout + CONNECT_TIMEOUT + 5
        return self._call(self._run(command, timeout, input), outer)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        log_path: str,
        cwd: str | None = None,
    ) -> int:
        command = spawn_command(argv, env=env, log_path=log_path, cwd=cwd)
        result = self._call(self._run(command, 60, None))
        pid = result.stdout.strip().splitlines()[-1:] if result.ok else []
        if not pid or not pid[0].isdigit():
            raise SshError(
                f"{self.name}: could not start {argv[0] if argv else 'a process'}: "
                f"{(result.stderr or result.stdout).strip()[:300]}"
            )
        return int(pid[0])

    # -- files

    async def _put_with(
        self, path: str, mode: int, fill: Callable[[asyncssh.SFTPClientFile], Awaitable[None]]
    ) -> None:
        """A temporary file created exclusively beside `path` with its final mode, filled,
        then renamed over `path` (SFTP posix-rename: atomic; a link at `path` is replaced,
        never followed). The mode is set again on the open file (fsetstat), in case the
        server's umask narrowed it: never a chmod through a name."""
        conn = await self._conn()
        target = PurePosixPath(path)
        tmp = str(target.with_name(f".{target.name[:200]}.{uuid.uuid4().hex[:12]}.tmp"))
        async with conn.start_sftp_client() as sftp:
            await sftp.makedirs(str(target.parent), exist_ok=True)
            attrs = asyncssh.SFTPAttrs(permissions=mode)
            try:
                async with sftp.open(tmp, "xb", attrs=attrs, encoding=None) as f:
                    await f.chmod(mode)
                    await fill(f)
                await sftp.posix_rename(tmp, path)
            except BaseException:
                with contextlib.suppress(asyncssh.SFTPError, OSError):
                    await sftp.remove(tmp)
                raise

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        async def fill(f: asyncssh.SFTPClientFile) -> None:
            await f.write(data)

        try:
            self._call(self._put_with(path, mode, fill))
        except asyncssh.SFTPError as exc:
            raise SshError(f"{self.name}: cannot write {path}: {exc.reason}") from None

    def put_file(self, local: Path, path: str, mode: int = 0o644) -> None:
        """Stream the contents of the local regular file `local` (never a link: a model
        shard may not fit in memory) to `path`, atomically like `put`."""
        fd = open_source(local)
        with open(fd, "rb") as src:

            async def fill(f: asyncssh.SFTPClientFile) -> None:
                offset = 0
                # 16 MiB per write: asyncssh splits it into parallel requests
                while chunk := src.read(16 << 20):
                    await f.write(chunk, offset)
                    offset += len(chunk)

            try:
                self._call(self._put_with(path, mode, fill))
            except asyncssh.SFTPError as exc:
                raise SshError(f"{self.name}: cannot write {path}: {exc.reason}") from None

    async def _get(self, path: str) -> bytes:
        conn = await self._conn()
        async with conn.start_sftp_client() as sftp:
            try:
                async with sftp.open(path, "rb", encoding=None) as f:
                    data = await f.read()
            except asyncssh.SFTPNoSuchFile:
                raise FileNotFoundError(path) from None
        return data if isinstance(data, bytes) else data.encode()

    def get(self, path: str) -> bytes:
        try:
            return self._call(self._get(path))
        except asyncssh.SFTPError as exc:
            raise SshError(f"{self.name}: cannot read {path}: {exc.reason}") from None

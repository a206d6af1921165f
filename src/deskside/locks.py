"""One deskside at a time on a thing: a lock file held with flock(2).

`hold(path, what)` takes the lock in `path` (created if absent, never through a link) and
writes the holder's pid into it; a second holder gets `Busy` naming that pid at once (it
does not wait). The kernel releases the lock when its holder exits, however it exits, so
the lock of a dead process is simply taken over. On release the file is removed.

Removing a lock file is safe because every taker checks, once it holds the lock, that the
file it locked is still the one at `path` (a holder that removed it meanwhile leaves the
taker with a lock on a removed file); if not, it tries again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from deskside.errors import Location, UsageError

_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TRIES = 20


class Busy(UsageError):
    """Another deskside holds the lock of the same thing."""

    def __init__(self, what: str, path: Path, pid: int | None) -> None:
        holder = f"deskside pid {pid}" if pid else "another deskside"
        super().__init__(
            f"{what} is busy: {holder} is working on it (lock {path})",
            hint=(
                f"wait for it to finish, or stop it (kill {pid}) and run the command again"
                if pid
                else "wait for it to finish, then run the command again"
            ),
            location=Location(str(path)),
        )
        self.pid = pid


def _holder(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        pid = int(text)
        return pid if pid > 0 else None
    return None


def _open(path: Path, what: str) -> int:
    try:
        fd = os.open(path, _OPEN_FLAGS, 0o644)
    except OSError as exc:
        if os.path.islink(path):
            raise UsageError(
                f"{path}: the lock file of {what} is a link; deskside follows no link it "
                "did not make",
                hint=f"remove it: rm -- {path}",
                location=Location(str(path)),
            ) from None
        raise UsageError(
            f"cannot lock {what}: {path}: {exc.strerror or type(exc).__name__}",
            location=Location(str(path)),
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UsageError(
            f"{path}: the lock file of {what} is not a regular file",
            hint=f"move it away: mv -- {path} {path}.old",
            location=Location(str(path)),
        )
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)


def acquire(path: Path, what: str) -> int:
    """Take the lock in `path` now (see the module docstring); the descriptor that holds
    it. `Busy` when another process holds it."""
    for _ in range(_TRIES):
        fd = _open(path, what)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            pid = _holder(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise Busy(what, path, pid) from None
            raise UsageError(
                f"cannot lock {what}: {path}: {exc.strerror}", location=Location(str(path))
            ) from None
        if _same_file(fd, path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)  # removed by its last holder meanwhile: lock the new one
    raise Busy(what, path, None)


def release(fd: int, path: Path) -> None:
    """Remove the lock file (still holding the lock), then let go."""
    try:
        if _same_file(fd, path):
            with contextlib.suppress(OSError):
                os.unlink(path)
    finally:
        os.close(fd)


@contextlib.contextmanager
def hold(path: Path, what: str) -> Iterator[None]:
    """Hold the lock in `path` for the `with` block; `Busy` (exit 2) naming the holder's pid
    when another process holds it. `what` names the locked thing in messages."""
    fd = acquire(path, what)
    try:
        yield
    finally:
        release(fd, path)

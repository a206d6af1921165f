"""One deskside at a time on a thing: a lock file held with flock(2).

`hold(path, what)` takes the lock in `path` (created if absent, never through a link) and
writes the holder's pid into it; a second holder gets `Busy` (exit 2) naming that pid at
once (it does not wait). A lock is per open file: a second `hold` of the same path in the
same process is `Busy` too. The kernel releases the lock when its holder exits, however it exits, so
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
from dataclasses import dataclass
from pathlib import Path

from deskside.errors import Location, UsageError
from deskside.safefs import open_folder

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


def _open(dir_fd: int, path: Path, what: str) -> int:
    try:
        fd = os.open(path.name, _OPEN_FLAGS, 0o644, dir_fd=dir_fd)
    except OSError as exc:
        if stat.S_ISLNK(_lstat_mode(dir_fd, path.name)):
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
    os.fchmod(fd, 0o644)  # whatever the umask: others may read the holder's pid
    return fd


def _lstat_mode(dir_fd: int, name: str) -> int:
    try:
        return os.lstat(name, dir_fd=dir_fd).st_mode
    except OSError:
        return 0


def _same_file(fd: int, dir_fd: int, name: str) -> bool:
    try:
        now = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)


@dataclass(frozen=True)
class Held:
    """A lock taken by `acquire`; give it back with `release`."""

    path: Path
    fd: int  # the lock file, flock'ed
    dir_fd: int  # its folder, so the file removed on release is the one locked


def acquire(path: Path, what: str) -> Held:
    """Take the lock in `path` now (see the module docstring). `Busy` when another process
    (or another `acquire` of this one) holds it."""
    dir_fd = open_folder(path.parent)
    try:
        for _ in range(_TRIES):
            fd = _open(dir_fd, path, what)
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
            if _same_file(fd, dir_fd, path.name):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                return Held(path, fd, dir_fd)
            os.close(fd)  # removed by its last holder meanwhile: lock the new one
        raise Busy(what, path, None)
    except BaseException:
        os.close(dir_fd)
        raise


def release(held: Held) -> None:
    """Remove the lock file (still holding the lock), then let go."""
    try:
        if _same_file(held.fd, held.dir_fd, held.path.name):
            with contextlib.suppress(OSError):
                os.unlink(held.path.name, dir_fd=held.dir_fd)
    finally:
        os.close(held.fd)
        os.close(held.dir_fd)


@contextlib.contextmanager
def hold(path: Path, what: str) -> Iterator[Held]:
    """Hold the lock in `path` for the `with` block; `Busy` (exit 2) naming the holder's pid
    when another process holds it. `what` names the locked thing in messages ("run
    local-tiny", "bundle folder out"). The folder of `path` is created if absent, like any
    folder deskside writes (`deskside.safefs`: 0700 under $DESKSIDE_HOME, no link followed
    below it).

        with locks.hold(runs_dir() / name / "run.lock", f"run {name}"):
            ...  # only one deskside at a time gets here for this run
    """
    held = acquire(path, what)
    try:
        yield held
    finally:
        release(held)

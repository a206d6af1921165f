"""Files deskside writes on this machine, and folders whose files it copies elsewhere.

Every write takes the same path (`write_file`, `copy_file`, `create_file`, `open_append`):

- The folders down to the target are opened one at a time from a trusted starting folder,
  each with `O_NOFOLLOW`: a link below it is never followed, it is refused with its path and
  where it points. A folder deskside creates is made 0700 and then given its mode with
  `fchmod` on the descriptor of the folder it just created (0700 under $DESKSIDE_HOME and
  for bundle folders, else what the caller asks), whatever the umask.
- The file is written to a temporary name created exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`,
  random) in the target's folder, given its final mode with `fchmod` on the open file, and
  renamed over the target: a link planted at the target is replaced, never written through.

The trusted starting folder is the nearest existing folder of the `root` a caller names
(a bundle folder), of $DESKSIDE_HOME for paths under it, or else of the target itself. That
folder may be a link (the user's own path); nothing deskside walks below it may be. Under
$DESKSIDE_HOME (deskside's own files) an existing folder, $DESKSIDE_HOME included, must also
belong to the user and not be writable by others.

`folder_files` lists a folder to copy by contents: regular files, and links to files inside
the folder; a link leading out of it is refused.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from deskside.errors import Location, UsageError

PRIVATE_DIR = 0o700
SHARED_DIR = 0o755

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class WriteRefused(UsageError):
    """A path deskside will not write through (a link, a file where a folder belongs, a
    folder someone else controls), or a write the system refused."""


def deskside_home() -> Path:
    """$DESKSIDE_HOME, default ~/.deskside: deskside's own files on this machine."""
    return Path(os.environ.get("DESKSIDE_HOME") or Path.home() / ".deskside").expanduser()


def _q(path: Path | str) -> str:
    return shlex.quote(str(path))


def _abs(path: Path) -> Path:
    return Path(os.path.abspath(path))


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _nearest_existing(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def _system_refused(path: Path, exc: OSError, doing: str) -> WriteRefused:
    reason = exc.strerror or type(exc).__name__
    hint = None
    if isinstance(exc, PermissionError):
        hint = f"write somewhere you may write, or check who owns {path}: ls -ld {_q(path)}"
    return WriteRefused(f"cannot {doing} {path}: {reason}", hint=hint, location=Location(str(path)))


def _link_refused(where: Path, dir_fd: int, name: str) -> WriteRefused | None:
    """The refusal for `name` in `dir_fd` when it is a link or not a folder, else None."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            target = "?"
        return WriteRefused(
            f"{where} is a link (to {target}); deskside writes only into real folders "
            "here and follows no link it did not make",
            hint=f"remove the link if it should not be there (rm -- {_q(where)}), or "
            "choose another folder",
            location=Location(str(where)),
        )
    if not stat.S_ISDIR(st.st_mode):
        return WriteRefused(
            f"{where} is a file, not a folder; deskside needs a folder there",
            hint=f"move it away: mv -- {_q(where)} {_q(str(where) + '.old')}",
            location=Location(str(where)),
        )
    return None


def _check_private(where: Path, st: os.stat_result) -> None:
    uid = os.geteuid()
    if st.st_uid != uid:
        raise WriteRefused(
            f"{where} belongs to uid {st.st_uid}, not to you (uid {uid}); deskside keeps its "
            "own files only in folders you own",
            hint=f"if it is yours: chown {uid} {_q(where)}; otherwise move it away: "
            f"mv -- {_q(where)} {_q(str(where) + '.old')}",
            location=Location(str(where)),
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise WriteRefused(
            f"{where} is writable by others (mode {mode:04o}); deskside keeps its own files "
            "only in folders others cannot change",
            hint=f"chmod 700 {_q(where)}",
            location=Location(str(where)),
        )


def _step(parent_fd: int, name: str, where: Path, mode: int, private: bool) -> int:
    """Open (creating it if absent) folder `name` in `parent_fd`, never through a link;
    closes `parent_fd`."""
    flags = _DIR_FLAGS | os.O_NOFOLLOW
    created = False
    try:
        try:
            fd = os.open(name, flags, dir_fd=parent_fd)
        except FileNotFoundError:
            try:
                os.mkdir(name, PRIVATE_DIR, dir_fd=parent_fd)  # never wider than 0700
                created = True
            except FileExistsError:
                pass  # made meanwhile by someone else: checked below like any other
            except OSError as exc:
                raise _system_refused(where, exc, "create the folder") from None
            fd = os.open(name, flags, dir_fd=parent_fd)
    except OSError as exc:
        raise (
            _link_refused(where, parent_fd, name) or _system_refused(where, exc, "open")
        ) from None
    finally:
        os.close(parent_fd)
    try:
        st = os.fstat(fd)
        if created and st.st_uid == os.geteuid():
            os.fchmod(fd, mode)  # the folder deskside just made, by its descriptor
        elif private:
            _check_private(where, st)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _start(folder: Path, root: Path | None, mode: int | None) -> tuple[Path, list[str], int, bool]:
    """Where a walk to `folder` starts (an existing folder, followed as given), the names
    below it, the mode of folders deskside creates, and whether the chain is deskside's own."""
    folder = _abs(folder)
    home = _abs(deskside_home())
    private = root is None and _under(folder, home)
    if private:
        root = home
    if root is None:
        start = _nearest_existing(folder)
    else:
        root = _abs(root)
        if not _under(folder, root):
            raise ValueError(f"{folder} is not under {root}")
        start = root if os.path.lexists(root) else _nearest_existing(root)
    names = list(folder.relative_to(start).parts)
    if mode is None:
        mode = PRIVATE_DIR if private else SHARED_DIR
    return start, names, mode, private


def open_folder(folder: Path, *, root: Path | None = None, mode: int | None = None) -> int:
    """A descriptor of `folder` (created if absent, see the module docstring); the caller
    closes it."""
    start, names, dir_mode, private = _start(folder, root, mode)
    try:
        fd = os.open(start, _DIR_FLAGS)
    except OSError as exc:
        if isinstance(exc, NotADirectoryError):
            raise WriteRefused(
                f"{start} is a file, not a folder; deskside needs a folder there",
                hint=f"move it away: mv -- {_q(start)} {_q(str(start) + '.old')}",
                location=Location(str(start)),
            ) from None
        raise _system_refused(start, exc, "open the folder") from None
    if private and start == _abs(deskside_home()):
        try:
            _check_private(start, os.fstat(fd))  # $DESKSIDE_HOME itself, when it exists
        except BaseException:
            os.close(fd)
            raise
    where = start
    for name in names:
        where = where / name
        fd = _step(fd, name, where, dir_mode, private)
    return fd


@contextlib.contextmanager
def folder(path: Path, *, root: Path | None = None, mode: int | None = None) -> Iterator[int]:
    """`open_folder` as a context manager."""
    fd = open_folder(path, root=root, mode=mode)
    try:
        yield fd
    finally:
        os.close(fd)


def make_dirs(path: Path, *, root: Path | None = None, mode: int | None = None) -> None:
    """Create folder `path` and the folders above it that are missing (see `open_folder`)."""
    os.close(open_folder(path, root=root, mode=mode))


def _tmp_name(name: str) -> str:
    return f".{name[:200]}.{secrets.token_hex(6)}.tmp"


def _fill_tmp(dir_fd: int, where: Path, mode: int, fill: Callable[[int], None]) -> str:
    """A new temporary file in `dir_fd` holding what `fill` writes, with mode `mode`."""
    tmp = _tmp_name(where.name)
    try:
        fd = os.open(tmp, _NEW_FLAGS, mode & 0o777, dir_fd=dir_fd)
    except OSError as exc:
        raise _system_refused(where.parent, exc, "write a file in") from None
    try:
        try:
            os.fchmod(fd, mode)  # the umask may have narrowed it; by descriptor, not name
            fill(fd)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        if isinstance(exc, OSError):
            raise _system_refused(where, exc, "write") from None
        raise
    return tmp


def _rename_over(dir_fd: int, tmp: str, where: Path) -> None:
    try:
        os.rename(tmp, where.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        if isinstance(exc, IsADirectoryError):
            raise WriteRefused(
                f"{where} is a folder; deskside writes a file there",
                hint=f"move it away: mv -- {_q(where)} {_q(str(where) + '.old')}",
                location=Location(str(where)),
            ) from None
        raise _system_refused(where, exc, "write") from None


def _write_all(data: bytes) -> Callable[[int], None]:
    def fill(fd: int) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    return fill


def _copy_from(source: Path) -> Callable[[int], None]:
    def fill(fd: int) -> None:
        src = open_source(source)
        with open(src, "rb") as s, open(fd, "wb", closefd=False) as d:
            shutil.copyfileobj(s, d, 1 << 20)

    return fill


def write_at(dir_fd: int, where: Path, data: bytes, mode: int) -> None:
    """Write `data` to file `where.name` of the open folder `dir_fd` (temporary file, then
    rename); `where` is the full path, for messages."""
    _rename_over(dir_fd, _fill_tmp(dir_fd, where, mode, _write_all(data)), where)


def write_file(
    path: Path, data: bytes, mode: int, *, root: Path | None = None, dir_mode: int | None = None
) -> None:
    """Write `data` to `path` with `mode` (see the module docstring); replaces a file there."""
    path = _abs(path)
    with folder(path.parent, root=root, mode=dir_mode) as fd:
        write_at(fd, path, data, mode)


def copy_file(
    source: Path, path: Path, mode: int, *, root: Path | None = None, dir_mode: int | None = None
) -> None:
    """Copy the contents of the regular file `source` (never a link) to `path`, like
    `write_file`: streamed, so a model shard need not fit in memory."""
    path = _abs(path)
    with folder(path.parent, root=root, mode=dir_mode) as fd:
        _rename_over(fd, _fill_tmp(fd, path, mode, _copy_from(source)), path)


def create_file(
    path: Path, data: bytes, mode: int, *, root: Path | None = None, dir_mode: int | None = None
) -> bool:
    """Create `path` holding `data` unless something is there already; False then. The file
    appears whole or not at all (a temporary file hard-linked to its name, which fails if
    the name exists); two processes at once: exactly one creates it."""
    path = _abs(path)
    with folder(path.parent, root=root, mode=dir_mode) as fd:
        tmp = _fill_tmp(fd, path, mode, _write_all(data))
        try:
            os.link(tmp, path.name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
        except FileExistsError:
            return False
        except OSError as exc:
            raise _system_refused(path, exc, "create") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
    return True


def open_append(path: Path, mode: int, *, root: Path | None = None) -> int:
    """A descriptor appending to the regular file `path` (created with `mode` if absent;
    never a link, a FIFO or a device); the caller closes it."""
    path = _abs(path)
    with folder(path.parent, root=root) as dir_fd:
        try:
            fd = os.open(path.name, _NEW_FLAGS | os.O_APPEND, mode, dir_fd=dir_fd)
            os.fchmod(fd, mode)
            return fd
        except FileExistsError:
            pass
        except OSError as exc:
            raise _system_refused(path, exc, "create") from None
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(path.name, flags, dir_fd=dir_fd)
        except OSError as exc:
            raise (_not_regular(path, dir_fd) or _system_refused(path, exc, "append to")) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise WriteRefused(f"{path} is not a regular file", location=Location(str(path)))
    os.set_blocking(fd, True)
    return fd


def _not_regular(path: Path, dir_fd: int) -> WriteRefused | None:
    try:
        st = os.lstat(path.name, dir_fd=dir_fd)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return WriteRefused(
            f"{path} is a link; deskside writes only to files it made",
            hint=f"remove the link: rm -- {_q(path)}",
            location=Location(str(path)),
        )
    if not stat.S_ISREG(st.st_mode):
        return WriteRefused(
            f"{path} is not a regular file",
            hint=f"move it away: mv -- {_q(path)} {_q(str(path) + '.old')}",
            location=Location(str(path)),
        )
    return None


def open_source(path: Path) -> int:
    """A read descriptor of the regular file `path`, never through a link at `path` itself
    (a FIFO or device is refused without blocking); the caller closes it."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if os.path.islink(path):
            raise WriteRefused(
                f"{path} is a link; deskside copies regular files only",
                hint=f"give the file it points to: {os.path.realpath(path)}",
                location=Location(str(path)),
            ) from None
        raise _system_refused(path, exc, "read") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise WriteRefused(f"{path} is not a regular file", location=Location(str(path)))
    os.set_blocking(fd, True)
    return fd


# --------------------------------------------------------------------------- folders to copy


def _link_out(link: Path, target: str, top: Path) -> WriteRefused:
    return WriteRefused(
        f"{link} is a link to {target}, outside the folder {top}; deskside copies file "
        "contents only and follows no link out of the folder",
        hint=f"replace the link with the file itself (cp --remove-destination -- "
        f"{_q(os.path.realpath(link))} {_q(link)}), or copy the folder with links resolved "
        f"(cp -rL -- {_q(top)} NEW_FOLDER) and use that",
        location=Location(str(link)),
    )


def _link_entry(path: Path, real_top: Path, top: Path) -> Path:
    target = os.readlink(path)
    real = Path(os.path.realpath(path))
    if not _under(real, real_top):
        raise _link_out(path, target, top)
    if real.is_dir():
        raise WriteRefused(
            f"{path} is a link to the folder {target}; deskside copies files, not links to folders",
            hint=f"replace the link with a real folder, or remove it: rm -- {_q(path)}",
            location=Location(str(path)),
        )
    if not real.is_file():
        raise WriteRefused(
            f"{path} is a link to {target}, which is not a regular file",
            hint=f"remove the link: rm -- {_q(path)}",
            location=Location(str(path)),
        )
    return real


def folder_files(top: Path) -> list[tuple[str, Path]]:
    """The files of `top` to copy, sorted: (relative POSIX path, the regular file to read).

    Regular files, and links to regular files inside `top` (copied as files: contents only,
    under the link's name). A link leading out of `top` (however it gets there), a link to a
    folder, a dangling link, a FIFO, socket or device is refused with its path and target.
    `top` itself may be a link; no link below it is walked into."""
    real_top = Path(os.path.realpath(top))
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        here = Path(dirpath)
        for name in sorted([*dirnames, *filenames]):
            path = here / name
            mode = os.lstat(path).st_mode
            rel = path.relative_to(top).as_posix()
            if stat.S_ISDIR(mode):
                continue
            if stat.S_ISREG(mode):
                out.append((rel, path))
            elif stat.S_ISLNK(mode):
                out.append((rel, _link_entry(path, real_top, top)))
            else:
                raise WriteRefused(
                    f"{path} is not a regular file (a FIFO, socket or device); deskside "
                    "copies regular files only",
                    hint=f"move it out of the folder: mv -- {_q(path)} ELSEWHERE",
                    location=Location(str(path)),
                )
    return sorted(out)

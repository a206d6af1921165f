"""Reading a small file of this machine without trusting it: a regular file only, and no
more than a given number of bytes.

A FIFO, a socket or a device is refused before it is opened (`stat` first), and the open
itself is non-blocking, so a FIFO swapped in between cannot hang the read; a file larger
than the limit (a 3 GiB sparse file, `/dev/zero` behind a link) is refused after reading at
most `limit + 1` bytes. Files of /proc and /sys are regular files whose size reads as 0 or
4096: they are read up to the limit like any other.

Both refusals are OSErrors (`NotRegularFile`, `FileTooLarge`), so code that treats an
unreadable file as absent keeps doing so.
"""

from __future__ import annotations

import errno
import os
import stat

CHUNK = 1 << 20


def file_kind(mode: int) -> str:
    """What a file is, in words: "a FIFO", "a directory", "a character device"..."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISREG, "a regular file"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")


class NotRegularFile(OSError):
    """A FIFO, socket, device or directory where a regular file was expected."""

    def __init__(self, path: str, mode: int) -> None:
        self.kind = file_kind(mode)
        self.is_dir = stat.S_ISDIR(mode)
        super().__init__(errno.EINVAL, f"{self.kind}, not a regular file", path)


class FileTooLarge(OSError):
    """A file longer than the reader's limit."""

    def __init__(self, path: str, limit: int) -> None:
        self.limit = limit
        super().__init__(errno.EFBIG, f"larger than {limit:,} bytes", path)


def read_small_file(path: str | os.PathLike[str], limit: int, *, follow: bool = True) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes.

    `follow=False` refuses a symbolic link as the last component (ELOOP). Raises
    FileNotFoundError (and the other OSErrors of open/read) as `open` would, NotRegularFile
    for anything but a regular file, FileTooLarge past `limit`."""
    name = os.fspath(path)
    st = os.stat(name) if follow else os.lstat(name)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, "a symbolic link", name)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(name, st.st_mode)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if not follow:
        flags |= os.O_NOFOLLOW
    fd = os.open(name, flags)
    try:
        st = os.fstat(fd)  # what was opened, not what was looked at
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(name, st.st_mode)
        if st.st_size > limit:
            raise FileTooLarge(name, limit)
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(CHUNK, limit + 1 - total))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise FileTooLarge(name, limit)
    finally:
        os.close(fd)

"""How a worker lands what it receives on disk during `deskside model sync`: each stream's
writes in a thread of its own (`Landing`), O_DIRECT where the file system takes it, buffered
writes whose writeback starts at once otherwise. Standard library only: part of the program
a node runs (`deskside.models.sync.node_program`)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import queue
import threading

from deskside.models.node_files import CHUNK

# O_DIRECT: the data goes from the receive buffer to the disk, never through the page cache
# (0: every write buffered, as on a file system that refuses O_DIRECT)
DIRECT = getattr(os, "O_DIRECT", 0)
ALIGN = 4096  # O_DIRECT offsets and lengths in whole blocks (4 KiB covers 512-byte disks)
BUFFERS = 3  # per stream: one arriving and being hashed, two on their way to the disk


def _write(fd: int, view: memoryview, pos: int) -> None:
    while len(view):
        n = os.pwrite(fd, view, pos)
        view, pos = view[n:], pos + n


def put(fd: int, view: memoryview, pos: int) -> None:
    """Write `view` at `pos`. An O_DIRECT file goes on without it from the first piece that
    is not in whole blocks (a file's end, a partial file of odd length) or that the file
    system refuses; buffered writes start their writeback at once and drop what is written
    (the page cache stays small, and the final fdatasync has little left to do)."""
    if DIRECT and fcntl.fcntl(fd, fcntl.F_GETFL) & DIRECT:
        whole = 0 if pos % ALIGN else len(view) - len(view) % ALIGN
        try:
            if whole:
                _write(fd, view[:whole], pos)
                view, pos = view[whole:], pos + whole
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
        if not len(view):
            return
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~DIRECT)
    _write(fd, view, pos)
    os.posix_fadvise(fd, pos, len(view), os.POSIX_FADV_DONTNEED)  # starts the writeback
    if pos > 2 * CHUNK:
        os.posix_fadvise(fd, 0, pos - 2 * CHUNK, os.POSIX_FADV_DONTNEED)


class Landing:
    """One stream's writes, in a thread of its own: the disk works while the next buffer
    arrives and is hashed. Buffers are page-aligned (mmap), as O_DIRECT needs."""

    def __init__(self) -> None:
        self.free: queue.Queue[mmap.mmap] = queue.Queue()
        for _ in range(BUFFERS):
            self.free.put(mmap.mmap(-1, CHUNK))
        self.todo: queue.Queue[tuple[int, mmap.mmap, int, int] | threading.Event | None]
        self.todo = queue.Queue()
        self.error: OSError | None = None
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while (item := self.todo.get()) is not None:
            if isinstance(item, threading.Event):
                item.set()
                continue
            fd, buf, n, pos = item
            try:
                if n and self.error is None:
                    put(fd, memoryview(buf)[:n], pos)
            except OSError as exc:
                self.error = exc
            finally:
                self.free.put(buf)

    def buffer(self) -> mmap.mmap:
        if self.error is not None:
            raise self.error
        return self.free.get()

    def write(self, fd: int, buf: mmap.mmap, n: int, pos: int) -> None:
        self.todo.put((fd, buf, n, pos))

    def drain(self) -> None:
        """Wait until every write handed over is done; its error, if one failed."""
        done = threading.Event()
        self.todo.put(done)
        done.wait()
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def close(self) -> None:
        self.todo.put(None)


def go_direct(fd: int) -> None:
    """O_DIRECT from here on, where the file system takes it."""
    if DIRECT:
        with contextlib.suppress(OSError):  # a file system without O_DIRECT: buffered
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | DIRECT)

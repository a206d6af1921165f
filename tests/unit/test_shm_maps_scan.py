"""The shared-memory scan run for real with this machine's awk (Debian's is mawk): a file
only mapped (its descriptor closed) is held, and a process whose maps cannot be read does
not end the scan."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

from deskside.facts.base import gather
from deskside.facts.shm import ShmScan, shm
from deskside.transport.local import LocalTransport

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mmap.restype = ctypes.c_void_p
LIBC.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PROT_READ, MAP_SHARED = 1, 1


def map_only(path: Path) -> tuple[int, int]:
    """Map `path` and close its descriptor (Python's mmap keeps a duplicate open: libc's
    does not), so only /proc/PID/maps shows it held."""
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        address = LIBC.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    return address, size


def scan(folder: Path) -> ShmScan:
    fact = shm(str(folder))
    result = gather(LocalTransport(), fact).result(fact)
    assert isinstance(result, ShmScan), result
    return result


def test_a_mapped_file_is_held_and_an_unmapped_one_is_not(tmp_path: Path) -> None:
    (tmp_path / "psm_mapped").write_bytes(bytes(8192))
    (tmp_path / "psm_free").write_bytes(bytes(8192))
    mapped = map_only(tmp_path / "psm_mapped")
    assert not any(
        os.path.realpath(f"/proc/self/fd/{fd}") == str(tmp_path / "psm_mapped")
        for fd in os.listdir("/proc/self/fd")
    )  # held only by the mapping
    try:
        found = scan(tmp_path)
        by_name = {e.name: e for e in found.entries}
        assert found.held(by_name["psm_mapped"])
        assert not found.held(by_name["psm_free"])
    finally:
        LIBC.munmap(*mapped)


def test_a_process_that_ends_during_the_scan_does_not_end_it(tmp_path: Path) -> None:
    (tmp_path / "psm_mapped").write_bytes(bytes(4096))
    mapped = map_only(tmp_path / "psm_mapped")
    short = [subprocess.Popen(["sleep", "0.01"]) for _ in range(20)]
    try:
        found = scan(tmp_path)
        assert found.held(found.entries[0])
    finally:
        LIBC.munmap(*mapped)
        for p in short:
            p.wait()

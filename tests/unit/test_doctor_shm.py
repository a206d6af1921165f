"""The doctor's shared-memory scan, run for real on a folder standing in for /dev/shm: an
orphaned NCCL segment, a decoy of the same kind held open by a live process, one mapped
by a live process, a file of an unknown program, and a name that is not plain."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from deskside.doctor.shm import Segment, orphans, parse_scan, scan_command

HOLD = """
import mmap, sys, time
f = open(sys.argv[1], "r+b")
m = mmap.mmap(f.fileno(), 0) if sys.argv[2] == "map" else None
if m is not None:
    f.close()
print("ready", flush=True)
time.sleep(600)
"""


def _write(path: Path, size: int) -> None:
    path.write_bytes(b"\1" * size)


def test_scan_reports_orphans_and_spares_what_is_in_use(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    _write(shm / "nccl-orphan", 64 * 1024)
    _write(shm / "nccl-held", 16 * 1024)
    _write(shm / "psm_mapped", 8 * 1024)
    _write(shm / "someone-elses", 4 * 1024)
    _write(shm / "nccl-with space", 4 * 1024)
    holders = []
    try:
        for name, how in (("nccl-held", "open"), ("psm_mapped", "map")):
            p = subprocess.Popen(
                [sys.executable, "-c", HOLD, str(shm / name), how],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
            holders.append(p)
        out = subprocess.run(scan_command(str(shm)), capture_output=True, text=True, check=True)
        segments, skipped = parse_scan(out.stdout)
    finally:
        for p in holders:
            p.kill()
            p.wait()
    by_name = {s.name: s for s in segments}
    assert skipped == 1  # the name with a space is never judged
    assert by_name["nccl-orphan"] == Segment("nccl-orphan", 64 * 1024, in_use=False)
    assert by_name["nccl-held"].in_use and by_name["psm_mapped"].in_use
    assert by_name["someone-elses"].kind is None
    assert [s.name for s in orphans(segments)] == ["nccl-orphan"]
    assert by_name["nccl-orphan"].kind == "NCCL"


def test_parse_is_strict_about_its_own_lines() -> None:
    segments, skipped = parse_scan("seg 4096 0 torch_1\nskipped 2\nnoise\n")
    assert segments == [Segment("torch_1", 4096, in_use=False)] and skipped == 2

"""The doctor's shared-memory findings from a real scan of a folder standing in for
/dev/shm: an orphaned NCCL segment, a decoy of the same kind held open by a live process,
one mapped by a live process, a file of an unknown program, an orphan whose name holds a
space, and a hard-linked file (never judged)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from deskside.doctor.shm import orphans, segments_of, shm_findings
from deskside.facts.base import gather
from deskside.facts.shm import ShmScan
from deskside.facts.shm import shm as shm_fact
from deskside.transport.local import LocalTransport

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
    _write(shm / "nccl-twice", 4 * 1024)
    (tmp_path / "nccl-elsewhere").hardlink_to(shm / "nccl-twice")
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
        fact = shm_fact(str(shm))
        scan = gather(LocalTransport(), fact).result(fact)
        assert isinstance(scan, ShmScan)
        segments, skipped = segments_of(scan)
    finally:
        for p in holders:
            p.kill()
            p.wait()
    by_name = {s.name: s for s in segments}
    assert skipped == 1  # the hard-linked file is never judged
    assert "nccl-twice" not in by_name
    assert by_name["nccl-orphan"].bytes == 64 * 1024 and not by_name["nccl-orphan"].in_use
    assert by_name["nccl-held"].in_use and by_name["psm_mapped"].in_use
    assert by_name["someone-elses"].kind is None
    assert sorted(s.name for s in orphans(segments)) == ["nccl-orphan", "nccl-with space"]
    assert by_name["nccl-orphan"].kind == "NCCL"
    findings = shm_findings(segments, skipped, "node0", str(shm))
    fixes = {f.detail["path"]: f for f in findings if f.kind == "shm-orphan"}
    assert set(fixes) == {f"{shm}/nccl-orphan", f"{shm}/nccl-with space"}
    assert all(f.fixable and f.action for f in fixes.values())

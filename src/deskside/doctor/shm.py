"""Shared-memory segments of a node for `deskside doctor`: every file in /dev/shm with the
bytes it holds and whether a live process maps it or holds it open.

On a unified-memory node (GB10) a segment is memory the GPU cannot have: NCCL's
(`nccl-*`), vLLM's message queues (`psm_*`, `vllm*`), torch's (`torch_*`) and Python
multiprocessing semaphores (`sem.mp-*`) outlive an engine killed with SIGKILL. One of those
kinds that no process maps or holds open is an orphan: nothing can reach it again, and
removing it returns its bytes. Anything else is reported, never removed.

The scan is the node's shared-memory fact (`deskside.facts.shm`): every entry by device and
inode, and the (device, inode) of everything a live process holds open or maps, so a
segment held through a bind mount or under a name with spaces is seen as held. Judging is
pure. Only regular files with one link are judged; links, folders and hard-linked files are
counted and left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from deskside.doctor.findings import Finding
from deskside.facts.shm import SHM_DIR, ShmEntry, ShmScan, remove_argv
from deskside.units import format_bytes

KINDS: tuple[tuple[str, str], ...] = (
    ("nccl-", "NCCL"),
    ("psm_", "vLLM message queue"),
    ("vllm", "vLLM"),
    ("torch_", "torch"),
    ("sem.mp-", "Python multiprocessing semaphore"),
)


@dataclass(frozen=True)
class Segment:
    name: str
    bytes: int  # allocated (what removing it returns)
    in_use: bool  # a live process maps it or holds it open (by device and inode)
    entry: ShmEntry | None = None  # what the scan saw: the removal checks it again

    @property
    def kind(self) -> str | None:
        """Which program family left it (None: not one doctor knows)."""
        return next((what for prefix, what in KINDS if self.name.startswith(prefix)), None)

    @property
    def orphan(self) -> bool:
        return self.kind is not None and not self.in_use


def segments_of(scan: ShmScan) -> tuple[list[Segment], int]:
    """The plain segments (regular files with one name) and how many entries are not plain
    (links, folders, hard-linked files: never judged, never removed)."""
    plain = [e for e in scan.entries if e.plain]
    segments = [Segment(e.name, e.bytes, scan.held(e), e) for e in plain]
    return segments, len(scan.entries) - len(plain)


def orphans(segments: list[Segment]) -> list[Segment]:
    return [s for s in segments if s.orphan]


def remove_command(segment: Segment, directory: str = SHM_DIR) -> list[str]:
    """Remove one segment, checked again on the node right before: still the same device
    and inode with one link, held by no process (else left alone, and said so)."""
    assert segment.entry is not None
    return remove_argv([segment.entry], directory)


def shm_findings(
    segments: list[Segment], skipped: int, node: str, directory: str = "/dev/shm"
) -> list[Finding]:
    """A fixable finding per orphan (its removal checks again that nothing uses it); one
    info line for the segments of known kinds that are in use."""
    out = [
        Finding(
            "shm-orphan",
            node,
            f"{directory}/{s.name}: {s.kind} shared memory no process uses, "
            f"{format_bytes(s.bytes)}",
            reclaimable_bytes=s.bytes,
            fixable=True,
            fix=f"rm {directory}/{s.name}",
            action=tuple(remove_command(s, directory)),
            detail={"path": f"{directory}/{s.name}"},
        )
        for s in orphans(segments)
    ]
    used = [s for s in segments if s.kind is not None and s.in_use]
    if used:
        out.append(
            Finding(
                "shm-in-use",
                node,
                f"{len(used)} segment(s) in {directory} held by running processes, "
                f"{format_bytes(sum(s.bytes for s in used))} (not offered)",
                severity="info",
            )
        )
    if skipped:
        out.append(
            Finding(
                "shm-skipped",
                node,
                f"{skipped} entrie(s) in {directory} that are links, folders or hard-linked "
                "files: never judged, never removed",
                severity="info",
            )
        )
    return out

"""Shared-memory segments of a node for `deskside doctor`: every file in /dev/shm with the
bytes it holds and whether a live process maps it or holds it open.

On a unified-memory node (GB10) a segment is memory the GPU cannot have: NCCL's
(`nccl-*`), vLLM's message queues (`psm_*`, `vllm*`), torch's (`torch_*`) and Python
multiprocessing semaphores (`sem.mp-*`) outlive an engine killed with SIGKILL. One of those
kinds that no process maps or holds open is an orphan: nothing can reach it again, and
removing it returns its bytes. Anything else is reported, never removed.

The scan runs on the node (`scan_command`, POSIX sh and coreutils); parsing and judging are
pure. Only plain names (letters, digits, `._-`) are judged; others are skipped and counted,
since a name with spaces or line breaks cannot be matched safely against /proc.
"""

from __future__ import annotations

from dataclasses import dataclass

from deskside.doctor.findings import Finding
from deskside.units import format_bytes

KINDS: tuple[tuple[str, str], ...] = (
    ("nccl-", "NCCL"),
    ("psm_", "vLLM message queue"),
    ("vllm", "vLLM"),
    ("torch_", "torch"),
    ("sem.mp-", "Python multiprocessing semaphore"),
)

SCAN_SH = r"""
dir=$1
inuse=$( { ls -l /proc/[0-9]*/fd 2>/dev/null; cat /proc/[0-9]*/maps 2>/dev/null; } \
  | sed -n "s|.*\($dir/[^ ]*\).*|\1|p" | sort -u)
skipped=0
for f in "$dir"/* "$dir"/.[!.]*; do
  [ -f "$f" ] || continue
  name=${f##*/}
  # only plain names: the in-use check matches whole words (every kind doctor knows is one)
  case $name in *[!A-Za-z0-9._-]*) skipped=$((skipped + 1)); continue ;; esac
  used=0
  case "
$inuse
" in *"
$dir/$name
"*) used=1 ;; esac
  set -- $(stat -c '%b %B' -- "$f")
  printf 'seg %s %s %s\n' "$(( $1 * $2 ))" "$used" "$name"
done
echo "skipped $skipped"
"""


@dataclass(frozen=True)
class Segment:
    name: str
    bytes: int  # allocated (what removing it returns)
    in_use: bool  # a live process maps it or holds it open

    @property
    def kind(self) -> str | None:
        """Which program family left it (None: not one doctor knows)."""
        return next((what for prefix, what in KINDS if self.name.startswith(prefix)), None)

    @property
    def orphan(self) -> bool:
        return self.kind is not None and not self.in_use


def scan_command(directory: str = "/dev/shm") -> list[str]:
    return ["sh", "-c", SCAN_SH, "sh", directory]


def parse_scan(text: str) -> tuple[list[Segment], int]:
    """The segments and how many names were skipped (not plain)."""
    segments: list[Segment] = []
    skipped = 0
    for line in text.splitlines():
        if line.startswith("seg "):
            _, size, used, name = line.split(" ", 3)
            segments.append(Segment(name=name, bytes=int(size), in_use=used == "1"))
        elif line.startswith("skipped "):
            skipped = int(line.split()[1])
    return segments, skipped


def orphans(segments: list[Segment]) -> list[Segment]:
    return [s for s in segments if s.orphan]


# Remove one segment, checked again right before: still a regular file (not a link), and
# still opened or mapped by no process. Exit 3: left alone (in use again, or gone).
REMOVE_SH = r"""
dir=$1; name=$2
case $name in ''|*[!A-Za-z0-9._-]*) echo "refusing name '$name'" >&2; exit 2 ;; esac
f=$dir/$name
if [ -L "$f" ] || [ ! -f "$f" ]; then echo "$f is gone or not a file" >&2; exit 3; fi
if { ls -l /proc/[0-9]*/fd 2>/dev/null; cat /proc/[0-9]*/maps 2>/dev/null; } \
  | sed -n "s|.*\($dir/[^ ]*\).*|\1|p" | grep -qxF -- "$f"; then
  echo "$f is in use now: left alone" >&2; exit 3
fi
rm -f -- "$f"
"""


def remove_command(name: str, directory: str = "/dev/shm") -> list[str]:
    return ["sh", "-c", REMOVE_SH, "sh", directory, name]


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
            action=tuple(remove_command(s.name, directory)),
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
                f"{skipped} file(s) in {directory} with names doctor does not judge",
                severity="info",
            )
        )
    return out

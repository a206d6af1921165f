"""A node's disk: for each folder asked about (which may not exist yet), its nearest existing
folder, whether the login user may write there and the space free on its file system; and
the bytes a folder already holds (`du`, links followed: a Hugging Face snapshot is links)."""

from __future__ import annotations

from dataclasses import dataclass

from deskside.facts.base import Fact, FactError

SPACE_SH = r"""
i=0
for want in "$@"; do
  p=$want
  while [ ! -e "$p" ]; do p=$(dirname -- "$p"); done
  if [ -w "$p" ]; then w=1; else w=0; fi
  free=$(df -Pk -- "$p" 2>/dev/null | awk 'NR == 2 { print $4 }')
  printf '%s writable=%s free_kib=%s existing=%s\n' "$i" "$w" "$free" "$p" | tr -d '\r'
  i=$((i + 1))
done
"""

HELD_SH = r"""
[ -d "$1" ] || { echo 0; exit 0; }
du -skL -- "$1" 2>/dev/null | awk '{ print $1 }'
"""


@dataclass(frozen=True)
class DiskSpace:
    """One folder asked about."""

    path: str
    existing: str  # the nearest existing folder (the path itself when it exists)
    writable: bool
    free_bytes: int | None  # None: df did not say


def disk_space(*paths: str) -> Fact[dict[str, DiskSpace]]:
    """path -> its DiskSpace, for every path asked about."""

    def parse(text: str) -> dict[str, DiskSpace]:
        out: dict[str, DiskSpace] = {}
        for line in text.splitlines():
            index, _, rest = line.partition(" writable=")
            if not index.isdigit() or int(index) >= len(paths):
                continue
            writable, _, rest = rest.partition(" free_kib=")
            free, _, existing = rest.partition(" existing=")
            path = paths[int(index)]
            out.setdefault(
                path,
                DiskSpace(
                    path,
                    existing,
                    writable == "1",
                    int(free) * 1024 if free.isdigit() and len(free) < 20 else None,
                ),
            )
        missing = [p for p in paths if p not in out]
        if missing:
            raise FactError(f"no answer for {missing[0]}")
        return out

    return Fact("disk_space", SPACE_SH, parse, args=paths, cap=64 << 10)


def parse_held(text: str) -> int:
    words = text.split()
    if len(words) != 1 or not words[0].isdigit() or len(words[0]) > 18:
        raise FactError("not a size")
    return int(words[0]) * 1024


def held_bytes(folder: str) -> Fact[int]:
    """The bytes `folder` holds (0 when it does not exist)."""
    return Fact(f"held_bytes {folder}", HELD_SH, parse_held, args=(folder,), cap=4096)

"""Shared memory on a node, known by (device, inode), never by path.

A segment in /dev/shm is held when a live process has it open or mapped. Paths cannot tell:
a container sees the host's /dev/shm through a bind mount under another path, a name may
hold spaces or line breaks, and a second hard link gives one segment two names. So the fact
reads, in the caller's mount namespace:

- every entry of the folder: its type, device, inode, link count, allocated bytes and name
  (`find -printf`, NUL-terminated, so any name reads whole);
- the (device, inode) of every file a live process holds open: `/proc/PID/fd/N` followed
  (the kernel's own link to the open file, whatever namespace opened it);
- the (device, inode) of every file a live process maps: `/proc/PID/maps` (device as
  major:minor in hex, inode in decimal).

`held(entry)` is then a set lookup. A segment deskside may remove is a regular file with one
link that nothing holds; `remove_argv` removes a named segment only if it is still that
(device, inode) with one link, checked on the node right before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from deskside.facts.base import Fact, FactError

SHM_DIR = "/dev/shm"
ENGINE_PREFIXES = ("psm_", "vllm", "torch_", "sem.mp-")
"""Segments of vLLM's message queues, torch and Python multiprocessing: what a run of an
engine leaves behind when its processes are killed."""
SCAN_CAP = 16 << 20  # bytes of the whole answer (a busy node: a few hundred thousand maps)

SHM_SH = r"""
dir=$1
find "$dir" -mindepth 1 -maxdepth 1 -printf 'E %y %D %i %n %b %f\0' 2>/dev/null
find -L /proc/[0-9]*/fd -mindepth 1 -maxdepth 1 -type f -printf 'H %D %i\0' 2>/dev/null
# cat, not awk FILES: mawk stops at the first maps file it cannot open (a process that
# ended); and mawk cuts a printf format at \0, so the records end in newlines, made NULs
cat /proc/[0-9]*/maps 2>/dev/null \
  | awk '$5 != 0 && $5 ~ /^[0-9]+$/ { print "M " $4 " " $5 }' | sort -u | tr '\n' '\0'
exit 0
"""


@dataclass(frozen=True)
class ShmEntry:
    name: str
    kind: str  # find's %y: f regular file, l link, d folder, ...
    dev: int
    ino: int
    links: int
    bytes: int  # allocated: what removing it returns

    @property
    def key(self) -> tuple[int, int]:
        return (self.dev, self.ino)

    @property
    def plain(self) -> bool:
        """A regular file with one name: the only kind deskside ever removes."""
        return self.kind == "f" and self.links == 1


@dataclass(frozen=True)
class ShmScan:
    entries: list[ShmEntry] = field(default_factory=list)
    held_keys: frozenset[tuple[int, int]] = frozenset()

    def held(self, entry: ShmEntry) -> bool:
        return entry.key in self.held_keys


def _int(word: str) -> int:
    if not word.isdigit():
        raise FactError(f"not a number: {word[:20]!r}")
    return int(word)


def _maps_dev(word: str) -> int:
    major, sep, minor = word.partition(":")
    if not sep:
        raise FactError(f"not a device: {word[:20]!r}")
    try:
        return os.makedev(int(major, 16), int(minor, 16))
    except ValueError:
        raise FactError(f"not a device: {word[:20]!r}") from None


def parse_shm(text: str) -> ShmScan:
    """The entries and the held (device, inode) pairs of `SHM_SH`'s answer."""
    entries: list[ShmEntry] = []
    held: set[tuple[int, int]] = set()
    for record in text.split("\0"):
        record = record.lstrip("\n")
        if not record:
            continue
        if record.startswith("E "):
            parts = record.split(" ", 6)
            if len(parts) != 7:
                raise FactError("a cut folder entry")
            _, kind, dev, ino, links, blocks, name = parts
            entries.append(
                ShmEntry(name, kind, _int(dev), _int(ino), _int(links), _int(blocks) * 512)
            )
        elif record.startswith("H "):
            _, dev, ino = record.split(" ", 2)
            held.add((_int(dev), _int(ino)))
        elif record.startswith("M "):
            _, dev, ino = record.split(" ", 2)
            held.add((_maps_dev(dev), _int(ino)))
        else:
            raise FactError("an answer the shared-memory scan never prints")
    return ShmScan(sorted(entries, key=lambda e: e.name), frozenset(held))


def shm(directory: str = SHM_DIR) -> Fact[ShmScan]:
    name = "shm" if directory == SHM_DIR else f"shm {directory}"
    return Fact(name, SHM_SH, parse_shm, args=(directory,), cap=SCAN_CAP)


# Remove each named segment only if it is still the (device, inode) seen, with one link,
# and held by no process now; prints the names removed (NUL after each), says on stderr
# why any other was left alone and exits 3 then. Names come as arguments: any byte but NUL
# and "/" is fine.
REMOVE_SH = r"""
dir=$1; shift
# a maps line's major:minor (hex) as stat prints st_dev (the kernel's new_encode_dev)
held=$( { find -L /proc/[0-9]*/fd -mindepth 1 -maxdepth 1 -type f -printf '%D:%i\n'
  cat /proc/[0-9]*/maps | awk '$5 != 0 { print $4, $5 }' | sort -u | while read -r d i; do
    ma=$((0x${d%%:*})); mi=$((0x${d#*:}))
    printf '%d:%s\n' "$(( (mi & 255) | (ma << 8) | ((mi & ~255) << 12) ))" "$i"; done
} 2>/dev/null | sort -u)
left=0
while [ $# -ge 3 ]; do
  name=$1; want="$2:$3"; shift 3
  case $name in ''|*/*|.|..) left=1; continue ;; esac
  f=$dir/$name
  if [ ! -f "$f" ] || [ -L "$f" ] \
    || [ "$(stat -c '%d:%i:%h' -- "$f" 2>/dev/null)" != "$want:1" ]; then
    echo "$f is gone or another file now: left alone" >&2; left=1; continue
  fi
  case "
$held
" in *"
$want
"*) echo "$f is in use now: left alone" >&2; left=1; continue ;; esac
  rm -f -- "$f" && printf '%s\0' "$name"
done
[ "$left" = 0 ] || exit 3
"""


def remove_argv(entries: list[ShmEntry], directory: str = SHM_DIR) -> list[str]:
    """One command removing `entries` each under the checks of `REMOVE_SH`."""
    args = [w for e in entries for w in (e.name, str(e.dev), str(e.ino))]
    return ["sh", "-c", REMOVE_SH, "sh", directory, *args]

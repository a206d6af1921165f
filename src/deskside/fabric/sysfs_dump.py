"""The remote side of the sysfs reader: a POSIX sh script printing what `read_snapshot`
needs from a node's /sys, and `DumpSource`, the tree recovered from its output."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DumpSource:
    """Files (relative path -> first line) and directories recovered from a dump."""

    files: Mapping[str, str]
    dirs: frozenset[str] = frozenset()
    origin: str = "sysfs dump"
    _children: dict[str, set[str]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for rel in [*self.files, *self.dirs]:
            parts = rel.strip("/").split("/")
            for depth in range(1, len(parts)):
                self._children.setdefault("/".join(parts[:depth]), set()).add(parts[depth])

    def read(self, rel: str) -> str | None:
        return self.files.get(rel.strip("/"))

    def listdir(self, rel: str) -> list[str]:
        return sorted(self._children.get(rel.strip("/"), set()))

    def describe(self) -> str:
        return self.origin


# Prints what `read_snapshot` needs as lines "F<TAB>path<TAB>value" (value = what
# `read -r` reads) and "D<TAB>path" for device/net/<netdev> directories, paths relative to
# the root given as $1. Unused (all-zero) GID slots are skipped: a port has 256 of them.
# Only regular files are read (`-f`): a FIFO cannot hang the node's shell.
DUMP_SCRIPT = r"""root=${1:-/sys}
r() {
  [ -f "$1" ] || return 0
  v=
  { IFS=' 	' read -r v < "$1"; } 2>/dev/null || :
  printf 'F\t%s\t%s\n' "${1#"$root"/}" "$v"
}
for d in "$root"/class/infiniband/*; do
  [ -d "$d" ] || continue
  for n in "$d"/device/net/*; do
    [ -e "$n" ] && printf 'D\t%s\n' "${n#"$root"/}"
  done
  for p in "$d"/ports/*; do
    [ -d "$p" ] || continue
    r "$p/state"; r "$p/rate"; r "$p/link_layer"
    for g in "$p"/gids/*; do
      [ -f "$g" ] || continue
      v=
      { IFS=' 	' read -r v < "$g"; } 2>/dev/null || :
      [ "$v" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue
      i=${g##*/}
      r "$g"; r "$p/gid_attrs/types/$i"; r "$p/gid_attrs/ndevs/$i"
    done
  done
done
for n in "$root"/class/net/*; do
  [ -e "$n" ] || continue
  printf 'D\t%s\n' "${n#"$root"/}"
  r "$n/mtu"; r "$n/operstate"; r "$n/speed"
done
"""


def dump_command(root: str = "/sys") -> list[str]:
    """argv printing a node's RDMA/netdev sysfs facts for `parse_dump` (POSIX sh)."""
    return ["sh", "-c", DUMP_SCRIPT, "deskside-sysfs-dump", root]


def parse_dump(text: str, origin: str = "sysfs dump") -> DumpSource:
    """The output of `dump_command()` as a source `read_snapshot` can read."""
    files: dict[str, str] = {}
    dirs: set[str] = set()
    for line in text.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "F":
            path, _, value = rest.partition("\t")
            files[path] = value
        elif kind == "D" and rest:
            dirs.add(rest)
    return DumpSource(files=files, dirs=frozenset(dirs), origin=origin)

"""A model in a node's Hugging Face cache: where huggingface_hub keeps a repo
(`hf_cache_entry`), and what a snapshot of one revision holds (`snapshot`): its links, each
file's size, mtime, ctime and inode (GNU find), and the record of the hashes deskside made
of them (`<entry>/<record-dir>/<revision>.json`). Nothing is hashed here: a whole model
would take minutes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from deskside.facts.base import Fact, FactError

RECORD_CAP = 64 << 20  # the record of hashes, at most
SNAPSHOT_SH = r"""
entry=$1; rev=$2
snap="$entry/snapshots/$rev"
if [ ! -d "$snap" ]; then echo snapshot=absent; exit 0; fi
echo snapshot=present
cd "$snap" || exit 0
find . -mindepth 1 -type l -printf 'link\t%P\t%l\n'
find -L . -mindepth 1 -type f -printf 'file\t%P\t%s\t%T@\t%C@\t%i\n' 2>/dev/null
rec="$entry/$3/$rev.json"
if [ -f "$rec" ]; then printf 'record\t'; head -c 67108864 -- "$rec" | tr -d '\n'; echo; fi
"""

StatKey = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode


def hf_cache_entry(hf_cache: str, repo: str) -> str:
    """Where huggingface_hub keeps `repo` under an HF_HOME (huggingface_hub.file_download:
    `<HF_HOME>/hub/models--org--name`)."""
    return f"{hf_cache.rstrip('/')}/hub/models--{repo.replace('/', '--')}"


@dataclass
class Snapshot:
    """One revision's snapshot. Files behind foreign links (links not into the entry's own
    `blobs/`) are named in `foreign` and left out of `files`."""

    present: bool
    files: dict[str, StatKey] = field(default_factory=dict)
    foreign: list[str] = field(default_factory=list)
    record: dict[str, dict[str, object]] = field(default_factory=dict)  # path -> hash entry


def _ns(stamp: str) -> int:
    """`1700000000.1234567890` (find's %T@) in nanoseconds."""
    sec, _, frac = stamp.partition(".")
    if not sec.isdigit() or len(sec) > 12 or (frac and not frac.isdigit()):
        raise ValueError(stamp)
    return int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])


def parse_snapshot(text: str) -> Snapshot:
    lines = text.splitlines()
    if "snapshot=absent" in lines:
        return Snapshot(present=False)
    if "snapshot=present" not in lines:
        raise FactError("no snapshot line")
    record: dict[str, dict[str, object]] = {}
    links: dict[str, str] = {}
    stats: dict[str, StatKey] = {}
    for line in lines:
        kind, _, rest = line.partition("\t")
        parts = rest.split("\t")
        try:
            if kind == "link" and len(parts) == 2:
                links[parts[0]] = parts[1]
            elif kind == "file" and len(parts) == 5:
                stats[parts[0]] = (int(parts[1]), _ns(parts[2]), _ns(parts[3]), int(parts[4]))
            elif kind == "record":
                data = json.loads(rest)
                files = data.get("files", {}) if isinstance(data, dict) else {}
                record = files if isinstance(files, dict) else {}
        except (ValueError, RecursionError):
            continue
    out = Snapshot(present=True, record=record)
    for path, target in sorted(links.items()):
        depth = len(PurePosixPath(path).parts) + 1  # snapshots/<rev>/<path>
        want = PurePosixPath(*([".."] * depth), "blobs")
        if PurePosixPath(target).parent != want:
            out.foreign.append(path)
    out.files = {path: key for path, key in sorted(stats.items()) if path not in out.foreign}
    return out


def snapshot(entry: str, revision: str, record_dir: str) -> Fact[Snapshot]:
    """The snapshot of `revision` in the cache entry `entry` (see `hf_cache_entry`), with
    the record of hashes kept in `<entry>/<record_dir>/`."""
    return Fact(
        "model_snapshot",
        SNAPSHOT_SH,
        parse_snapshot,
        args=(entry, revision, record_dir),
        cap=RECORD_CAP + (64 << 20),
    )

"""Does every worker hold the head's snapshot of the pinned revision? The quick check `up`
runs before it changes anything.

A fact (a POSIX sh command and a pure parser): the snapshot's links, each file's size,
mtime, ctime and inode (GNU find), and the record of the hashes made by `model sync`,
`model manifest` or `model verify`. A file's hash is taken from the record when the four
are still those recorded; nothing is hashed here (150 GB would take minutes), so a file
changed since it was hashed counts as a difference until `model sync` or `model verify`
hashes it again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from deskside.errors import DesksideError
from deskside.models.node_files import RECORD_DIR, recorded
from deskside.models.sync import cache_entry
from deskside.recipe.types import Recipe
from deskside.transport.base import Transport

MODEL_FACT_SH = r"""
entry=$1; rev=$2
echo deskside_model=1
snap="$entry/snapshots/$rev"
if [ ! -d "$snap" ]; then echo snapshot=absent; exit 0; fi
echo snapshot=present
cd "$snap" || exit 0
find . -mindepth 1 -type l -printf 'link\t%P\t%l\n'
find -L . -mindepth 1 -type f -printf 'file\t%P\t%s\t%T@\t%C@\t%i\n' 2>/dev/null
rec="$entry/$3/$rev.json"
if [ -f "$rec" ]; then printf 'record\t'; head -c 67108864 -- "$rec" | tr -d '\n'; echo; fi
"""


def model_fact(entry: str, revision: str) -> list[str]:
    return ["sh", "-c", MODEL_FACT_SH, "sh", entry, revision, RECORD_DIR]


@dataclass
class NodeModel:
    present: bool
    files: dict[str, tuple[int, str | None]] = field(default_factory=dict)  # size, sha256
    foreign: list[str] = field(default_factory=list)  # links not into ../(..)/blobs/


def _ns(stamp: str) -> int:
    """`1700000000.1234567890` (find's %T@) in nanoseconds."""
    sec, _, frac = stamp.partition(".")
    return int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])


def parse_model_fact(stdout: str) -> NodeModel | None:
    """None when the fact did not run (no marker line)."""
    lines = stdout.splitlines()
    if "deskside_model=1" not in lines:
        return None
    if "snapshot=present" not in lines:
        return NodeModel(present=False)
    record: dict[str, dict[str, object]] = {}
    links: dict[str, str] = {}
    stats: dict[str, tuple[int, int, int, int]] = {}
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
                record = data.get("files", {}) if isinstance(data, dict) else {}
        except ValueError:
            continue
    out = NodeModel(present=True)
    for path, target in sorted(links.items()):
        depth = len(PurePosixPath(path).parts) + 1  # snapshots/<rev>/<path>
        want = PurePosixPath(*([".."] * depth), "blobs")
        if PurePosixPath(target).parent != want:
            out.foreign.append(path)
    for path, key in sorted(stats.items()):
        if path not in out.foreign:
            out.files[path] = (key[0], recorded(record.get(path), key))
    return out


def _names(items: list[str], limit: int = 5) -> str:
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def differences(head: NodeModel, worker: NodeModel) -> dict[str, list[str]]:
    """kind -> paths where the worker's snapshot is not the head's (pure)."""
    out: dict[str, list[str]] = {}
    for path, (size, sha) in sorted(head.files.items()):
        got = worker.files.get(path)
        if got is None:
            kind = "missing"
        elif got[0] != size or (sha and got[1] and got[1] != sha):
            kind = "differs"
        elif sha is None or got[1] is None:
            kind = "changed since hashed"
        else:
            continue
        out.setdefault(kind, []).append(path)
    extra = sorted(set(worker.files) - set(head.files))
    if extra:
        out["extra"] = extra
    if worker.foreign:
        out["foreign link"] = worker.foreign
    return out


def model_findings(
    recipe: Recipe, transports: Mapping[str, Transport], recipe_path: str
) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(node, what, fix) for each worker whose snapshot differs from the head's, and notes.
    Only for a pinned Hugging Face revision on more than one node: a `model.path` folder is
    pushed by the deploy itself."""
    m = recipe.model
    workers = recipe.workers
    if m.repo is None or m.revision is None or not workers:
        return [], []
    entry = cache_entry(recipe.runtime.hf_cache, m.repo)
    what = f"{m.repo}@{m.revision[:12]}"
    sync = f"deskside model sync {recipe_path}"
    seen: dict[str, NodeModel] = {}
    notes: list[str] = []
    for node in recipe.cluster.nodes:
        try:
            r = transports[node.name].run(model_fact(entry, m.revision), timeout=120)
        except DesksideError as exc:
            return [(node.name, exc.message, exc.hint or "")], notes
        got = parse_model_fact(r.stdout)
        if got is None:
            notes.append(f"{node.name}: could not list the model's snapshot (exit {r.rc})")
            continue
        seen[node.name] = got
    head = seen.get(recipe.head.name)
    if head is None:
        return [], notes
    if not head.present:
        fix = "download it on the head: deskside model pull RECIPE"
        return [
            (recipe.head.name, f"no snapshot of {what} in {recipe.runtime.hf_cache}", fix)
        ], notes
    found = []
    for node in workers:
        w = seen.get(node.name)
        if w is None:
            continue
        if not w.present:
            found.append((node.name, f"no copy of {what} in {recipe.runtime.hf_cache}", sync))
            continue
        diff = differences(head, w)
        if diff:
            text = "; ".join(f"{k}: {_names(v)}" for k, v in diff.items())
            found.append(
                (
                    node.name,
                    f"model {what} differs from the head's (quick check against the recorded "
                    f"sha256 of each file, by size, mtime, ctime and inode): {text}",
                    f"{sync} (copies what differs); deskside model verify hashes every file",
                )
            )
    if not found:
        notes.append(
            f"model {what}: every worker holds the head's files (quick check of the recorded "
            "hashes; deskside model verify hashes them all)"
        )
    return found, notes

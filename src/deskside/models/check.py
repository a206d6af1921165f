"""Does every worker hold the head's snapshot of the pinned revision? The quick check `up`
runs before it changes anything.

Each node's snapshot is a fact (`deskside.facts.model_folder.snapshot`: the snapshot's
links, each file's size, mtime, ctime and inode, and the record of the hashes made by
`model sync`, `model manifest` or `model verify`), read in the preflight's round trip. A
file's hash is taken from the record when the four are still those recorded; nothing is
hashed here (150 GB would take minutes), so a file changed since it was hashed counts as a
difference until `model sync` or `model verify` hashes it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from deskside.errors import DesksideError
from deskside.facts.base import Fact, Unread
from deskside.facts.model_folder import Snapshot, hf_cache_entry, snapshot
from deskside.models.node_files import RECORD_DIR, recorded
from deskside.recipe.types import Recipe


def snapshot_fact(recipe: Recipe) -> Fact[Snapshot] | None:
    """The fact `model_findings` reads on every node (a pinned revision on more than one
    node), or None."""
    m = recipe.model
    if m.repo is None or m.revision is None or not recipe.workers:
        return None
    return snapshot(hf_cache_entry(recipe.runtime.hf_cache, m.repo), m.revision, RECORD_DIR)


@dataclass
class NodeModel:
    present: bool
    files: dict[str, tuple[int, str | None]] = field(default_factory=dict)  # size, sha256
    foreign: list[str] = field(default_factory=list)  # links not into ../(..)/blobs/


def node_model(snap: Snapshot) -> NodeModel:
    """Each file's size and, when the record still describes it, its recorded sha256."""
    out = NodeModel(present=snap.present, foreign=list(snap.foreign))
    for path, key in snap.files.items():
        out.files[path] = (key[0], recorded(snap.record.get(path), key))
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
    recipe: Recipe,
    answers: Mapping[str, Snapshot | Unread | DesksideError],
    recipe_path: str,
) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(node, what, fix) for each worker whose snapshot differs from the head's, and notes,
    from every node's answer to `snapshot_fact`. Only for a pinned Hugging Face revision on
    more than one node: a `model.path` folder is pushed by the deploy itself."""
    m = recipe.model
    workers = recipe.workers
    if m.repo is None or m.revision is None or not workers:
        return [], []
    what = f"{m.repo}@{m.revision[:12]}"
    sync = f"deskside model sync {recipe_path}"
    seen: dict[str, NodeModel] = {}
    notes: list[str] = []
    for node in recipe.cluster.nodes:
        got = answers.get(node.name, Unread("model_snapshot", "not read"))
        if isinstance(got, DesksideError):
            return [(node.name, got.message, got.hint or "")], notes
        if isinstance(got, Unread):
            notes.append(f"{node.name}: could not list the model's snapshot ({got.reason})")
            continue
        seen[node.name] = node_model(got)
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

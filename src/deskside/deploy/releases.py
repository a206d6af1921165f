"""The commands (argv lists, POSIX sh for the scripts) that change a deployment's files on
a node: releases pushed into a staging folder and renamed into place, the `current` link
switched atomically, old releases pruned, model folders swapped in whole. Pure: nothing
here runs anything. The layout is `deskside.layout.NodeLayout`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import PurePosixPath

from deskside.engine.services import ServiceSite, services
from deskside.layout import NodeLayout
from deskside.recipe.types import Recipe
from deskside.render.compose import engine_caches
from deskside.runtime.ops import stamp

RELEASE_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}(?:-[0-9]+)?")


def release_id(when: datetime, lock_sha256: str) -> str:
    """`20260101T120000Z-1a2b3c4d`: sortable by time, names the bundle it holds."""
    return f"{stamp(when)}-{lock_sha256[:8]}"


# --------------------------------------------------------------------------- releases


def prepare_dirs(layout: NodeLayout, container_mounts: Sequence[str] = ()) -> list[str]:
    """Create the recipe's folders on the node (`mkdir -p` changes no mode), and the
    sources of the container's bind mounts deskside owns (the caches): Compose files
    never ask Docker to create them, as v1.29 cannot."""
    return ["mkdir", "-p", "--", layout.releases, layout.logs, *container_mounts]


def clear_staging(layout: NodeLayout, rid: str) -> list[str]:
    return ["rm", "-rf", "--", layout.staging(rid)]


def commit_release(layout: NodeLayout, rid: str) -> list[str]:
    """Rename the complete staging folder to its release name (atomic; refuses to replace
    an existing release)."""
    return ["mv", "-T", "--", layout.staging(rid), layout.release(rid)]


def read_current(layout: NodeLayout) -> list[str]:
    return ["readlink", "--", layout.current]


def parse_current(readlink_stdout: str) -> str | None:
    """The release id `current` points at (`releases/<id>`), or None."""
    target = readlink_stdout.strip()
    if not target:
        return None
    name = PurePosixPath(target).name
    return name if RELEASE_RE.fullmatch(name) else None


SWITCH_SH = 'ln -sfn -- "$1" "$2" && mv -Tf -- "$2" "$3"'


def switch_current(layout: NodeLayout, rid: str) -> list[str]:
    """Point `current` at release `rid`: a new link under a temporary name, renamed over
    `current` (rename(2) is atomic: readers see the old or the new release, never none).
    The link is relative, so it resolves the same from a container or a bind mount."""
    tmp = f"{layout.recipe_dir}/.current-{rid}"
    return ["sh", "-c", SWITCH_SH, "sh", f"releases/{rid}", tmp, layout.current]


def remove_current(layout: NodeLayout) -> list[str]:
    return ["rm", "-f", "--", layout.current]


def list_releases(layout: NodeLayout) -> list[str]:
    return ["ls", "-1", "--", layout.releases]


def releases_to_prune(listing: str, keep: int, protect: set[str]) -> list[str]:
    """The oldest releases beyond `keep` (never one in `protect`)."""
    ids = sorted(n for n in listing.split() if RELEASE_RE.fullmatch(n))
    old = ids[:-keep] if keep > 0 else ids
    return [r for r in old if r not in protect]


def prune(layout: NodeLayout, ids: list[str]) -> list[str]:
    return ["rm", "-rf", "--", *(layout.release(r) for r in ids)]


# --------------------------------------------------------------------------- files


# chmod follows a link: it runs only on a real folder (a link there is refused, exit 2)
PRIVATE_DIR_SH = (
    'if [ -L "$1" ]; then echo "deskside: $1 is a link; remove it (rm -- $1)" >&2; exit 2; fi; '
    'mkdir -p -m 700 -- "$1" && chmod 700 -- "$1"'
)


def private_dir(path: str) -> list[str]:
    """A folder only its owner can enter (for secrets); refused when `path` is a link."""
    return ["sh", "-c", PRIVATE_DIR_SH, "sh", path]


# rm -rf of a link removes the link only (operands have no trailing slash); mv renames a
# link itself; nothing here changes a mode
MODEL_SWAP_SH = r"""
set -e
new=$1; target=$2; old=$3
rm -rf -- "$old"
if [ -e "$target" ] || [ -L "$target" ]; then mv -T -- "$target" "$old"; fi
mv -T -- "$new" "$target"
rm -rf -- "$old"
"""


def swap_model_folder(staging: str, target: str) -> list[str]:
    """Put a completely uploaded model folder in place of the previous one."""
    old = f"{target}.old"
    return ["sh", "-c", MODEL_SWAP_SH, "sh", staging, target, old]


def container_mounts(recipe: Recipe, layout: NodeLayout, node: str) -> tuple[str, ...]:
    """The bind-mount sources of `node`'s containers that deskside owns and creates (Compose
    files never ask Docker to): the engine's caches under the container runtime, and the
    data of the services that run in their images there (`Mount.created`)."""
    mounts = engine_caches(recipe, layout) if recipe.runtime.kind == "container" else []
    if recipe.runtime.kind == "container" or recipe.runtime.systemd:  # Compose runs them
        for s in services(recipe, ServiceSite.deployed(recipe)):
            if s.node == node and s.in_container:
                mounts += s.mounts
    return tuple(dict.fromkeys(m.source for m in mounts if m.created))

"""What a node's Docker holds for the recipe's engine image: one fact, read in one round
trip with the others (`deskside.facts.base.gather`).

`pinned` is the image the pinned reference (name@sha256:<manifest digest>) resolves to
there: what Compose runs. `tagged` is the image the same name with its tag names there
(e.g. an older pull of name:latest), the one a person would find with `docker images`.
Both are image IDs (the sha256 of the image's config, which lists every layer's digest).
`store` is Docker's image store: `containerd` keeps a loaded image's manifest digest,
`classic` (before the containerd image store) does not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deskside.facts.base import Fact, FactError

IMAGE_SH = r"""
v=$(docker version --format '{{.Server.Version}}' 2>/dev/null) || { echo daemon=; exit 0; }
echo "daemon=$v"
case "$(docker info --format '{{json .DriverStatus}}' 2>/dev/null)" in
  *io.containerd.snapshotter*) echo store=containerd ;;
  *) echo store=classic ;;
esac
echo "pinned=$(docker image inspect --format '{{.Id}} {{.Size}}' "$1" 2>/dev/null)"
echo "tagged=$(docker image inspect --format '{{.Id}}' "$2" 2>/dev/null)"
"""

IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Ref:
    """A pinned image reference, split."""

    name: str  # registry/repository, no tag
    tag: str | None
    digest: str  # sha256:<64 hex>

    @property
    def pinned(self) -> str:
        return f"{self.name}@{self.digest}"

    @property
    def tagged(self) -> str:
        return f"{self.name}:{self.tag}" if self.tag else self.name


def split_ref(image: str) -> Ref:
    """`name[:tag]@sha256:<digest>` (the recipe rules require the digest)."""
    named, _, digest = image.rpartition("@")
    last = named.rsplit("/", 1)[-1]
    if ":" in last:
        name, _, tag = named.rpartition(":")
        return Ref(name, tag, digest)
    return Ref(named, None, digest)


@dataclass(frozen=True)
class NodeImage:
    daemon: str | None  # the Docker Engine's version; None: no daemon answers
    store: str = "classic"
    pinned: str | None = None  # image ID the pinned reference resolves to
    size: int = 0  # bytes of the pinned image
    tagged: str | None = None  # image ID of name:tag


def parse_image(text: str) -> NodeImage:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key not in values:
            values[key] = value.strip()
    if "daemon" not in values:
        raise FactError("no daemon line")
    if not values["daemon"]:
        return NodeImage(None)
    pinned_id, _, size = values.get("pinned", "").partition(" ")
    tagged = values.get("tagged", "")
    for value in (pinned_id, tagged):
        if value and IMAGE_ID.fullmatch(value) is None:
            raise FactError(f"not an image ID: {value[:80]!r}")
    return NodeImage(
        values["daemon"],
        values.get("store", "classic"),
        pinned_id or None,
        int(size) if size.isdigit() else 0,
        tagged or None,
    )


def image_fact(image: str) -> Fact[NodeImage]:
    ref = split_ref(image)
    return Fact("engine_image", IMAGE_SH, parse_image, args=(ref.pinned, ref.tagged), cap=4096)

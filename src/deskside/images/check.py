"""Does every node hold the head's engine image, by digest? Pure: the nodes' answers
(`deskside.images.held.NodeImage`) in, findings out. `up` runs it in its preflight and
refuses while a worker's image is missing or another one; `image sync` after each copy.

A node holds the image when its Docker resolves the recipe's pinned reference to the
image ID the head's resolves it to: that is what Compose will run there. When the head
holds no image for the reference, nothing is compared (Docker pulls it by digest on every
node at start)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from deskside.errors import DesksideError
from deskside.facts.base import Unread
from deskside.images.held import NodeImage, split_ref
from deskside.recipe.types import Recipe


def short(image_id: str | None) -> str:
    return (image_id or "none").removeprefix("sha256:")[:12]


@dataclass(frozen=True)
class Verdict:
    node: str
    ok: bool
    what: str  # "same", "missing", "differs", "no docker", "unread"
    detail: str


def node_verdict(recipe: Recipe, node: str, head: NodeImage, got: NodeImage) -> Verdict:
    assert recipe.engine.image is not None
    ref = split_ref(recipe.engine.image)
    if got.daemon is None:
        return Verdict(node, False, "no docker", "Docker's daemon does not answer there")
    if got.pinned is not None and got.pinned == head.pinned:
        return Verdict(node, True, "same", f"holds {ref.pinned} (image {short(got.pinned)})")
    if got.tagged is not None and got.tagged != head.pinned:
        return Verdict(
            node,
            False,
            "differs",
            f"its {ref.tagged} is image {short(got.tagged)}, the head's {ref.pinned} is "
            f"image {short(head.pinned)}",
        )
    if got.tagged is not None:
        return Verdict(
            node,
            False,
            "missing",
            f"holds the head's image {short(got.tagged)} as {ref.tagged}, but its Docker "
            f"does not resolve {ref.pinned} (a loaded image keeps no registry digest in "
            "Docker's classic image store), so Compose would pull it at start",
        )
    return Verdict(node, False, "missing", f"holds no image for {ref.pinned}")


def image_findings(
    recipe: Recipe, answers: Mapping[str, NodeImage | Unread | DesksideError], recipe_file: str
) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(node, what, how to fix) for each worker whose image is not the head's, and notes."""
    if recipe.engine.image is None or recipe.runtime.kind != "container":
        return [], []
    head = recipe.head.name
    found = answers.get(head)
    if not isinstance(found, NodeImage) or found.pinned is None:
        return [], [
            f"the head holds no image for engine.image: Docker pulls it by digest on each "
            f"node at start (deskside image sync {recipe_file} --from registry pulls it first)"
        ]
    out: list[tuple[str, str, str]] = []
    fix = f"deskside image sync {recipe_file}"
    for node in recipe.cluster.nodes:
        if node.name == head:
            continue
        got = answers.get(node.name)
        if isinstance(got, Unread):
            out.append((node.name, f"could not read its Docker images: {got.reason}", fix))
        elif isinstance(got, DesksideError):
            continue  # the preflight reports the node itself
        elif got is not None:
            v = node_verdict(recipe, node.name, found, got)
            if not v.ok:
                out.append((node.name, f"engine image {v.what}: {v.detail}", fix))
    return out, []

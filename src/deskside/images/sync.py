"""`deskside image sync`: the recipe's engine image, by digest, on every node.

- `head` (default): the head's Docker streams the image it resolves the pinned reference to
  (`docker save NAME@sha256:...`) over the fabric into each worker's Docker (`docker load`),
  through the SSH that `deskside setup` gives the head to its workers (the worker by its
  name, with the head's own key and pinned host key); nothing lands on a disk in between.
  Docker's classic image store keeps no registry digest for a loaded image, so the copy is
  refused up front on a worker that has it (its Docker could not resolve the pinned
  reference afterwards).
- `registry`: every node pulls the pinned reference from the registry it names (Docker
  checks the manifest against the digest).

Either way each node is read again afterwards and holds the image only when its Docker
resolves the pinned reference to the head's image ID (`deskside.images.check`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from deskside.errors import DesksideError, UsageError
from deskside.facts.base import gather
from deskside.images.check import node_verdict, short
from deskside.images.held import NodeImage, image_fact, split_ref
from deskside.recipe.types import Recipe
from deskside.runtime.ops import at_once
from deskside.transport.base import Transport

Source = Literal["head", "registry"]
Say = Callable[[str], None]
COPY_TIMEOUT = 6 * 3600.0
READ_TIMEOUT = 60.0

# $1 the pinned reference, $2 the worker as the head's ssh config names it
STREAM_SH = (
    'set -o pipefail 2>/dev/null; docker save "$1" | '
    'ssh -o BatchMode=yes -o ConnectTimeout=15 "$2" docker load'
)


@dataclass
class NodeSync:
    node: str
    ok: bool
    action: str  # "already", "loaded", "pulled", "refused", "failed"
    image: str | None = None  # the image ID it holds for the reference afterwards
    seconds: float = 0.0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _quiet(msg: str) -> None:
    pass


def read_image(t: Transport, image: str) -> NodeImage:
    fact = image_fact(image)
    found = gather(t, fact, timeout=READ_TIMEOUT).result(fact)
    if not isinstance(found, NodeImage):
        raise DesksideError(f"{t.name}: could not read its Docker images ({found.reason})")
    return found


def _image(recipe: Recipe) -> str:
    if recipe.engine.image is None:
        raise UsageError(
            f"recipe {recipe.name} names no engine.image",
            hint="image sync is for runtime.kind: container with engine.image pinned by digest",
        )
    return recipe.engine.image


def sync(
    recipe: Recipe,
    ts: Mapping[str, Transport],
    source: Source = "head",
    say: Say = _quiet,
    recipe_file: str = "RECIPE",
) -> tuple[NodeImage, list[NodeSync]]:
    """Put the engine image on every node; (the head's image, each node's result).
    `recipe_file`: how the hints name the recipe."""
    image = _image(recipe)
    ref = split_ref(image)
    names = [n.name for n in recipe.cluster.nodes]
    head = recipe.head.name
    say(f"reading {len(names)} node(s)")
    seen = at_once(names, lambda n: read_image(ts[n], image))
    if source == "registry":
        todo = [n for n in names if seen[n].daemon is not None and seen[n].pinned is None]
        results: dict[str, NodeSync] = {}

        def pull(name: str) -> None:
            say(f"{name}: docker pull {ref.pinned}")
            t0 = time.monotonic()
            r = ts[name].run(["docker", "pull", ref.pinned], timeout=COPY_TIMEOUT)
            took = time.monotonic() - t0
            if not r.ok:
                results[name] = NodeSync(
                    name,
                    False,
                    "failed",
                    seconds=took,
                    problems=[f"docker pull failed: {r.stderr.strip()[-300:]}"],
                    hints=["check that the node reaches the registry the image names"],
                )
            else:
                results[name] = NodeSync(name, True, "pulled", seconds=took)

        at_once(todo, pull)
        after = at_once(names, lambda n: read_image(ts[n], image))
        head_image = after[head]
        if head_image.pinned is None:
            raise DesksideError(
                f"{head}: its Docker does not resolve {ref.pinned} after the pull",
                hint="look at `docker pull` on the head",
            )
        out = []
        for name in names:
            done = results.get(name, NodeSync(name, True, "already"))
            v = node_verdict(recipe, name, head_image, after[name])
            done.ok = done.ok and v.ok
            done.image = after[name].pinned
            if not v.ok and not done.problems:
                done.problems.append(v.detail)
            out.append(done)
        return head_image, out
    head_image = seen[head]
    if head_image.daemon is None:
        raise DesksideError(f"{head}: Docker's daemon does not answer", hint="start Docker there")
    if head_image.pinned is None:
        raise DesksideError(
            f"the head ({head}) holds no image for {ref.pinned}",
            hint=f"pull it there first (docker pull {image}), or let every node pull it: "
            "--from registry",
        )
    out = [NodeSync(head, True, "already", head_image.pinned, bytes=0)]
    workers = [n for n in names if n != head]

    def copy(name: str) -> NodeSync:
        got = seen[name]
        v = node_verdict(recipe, name, head_image, got)
        if v.ok:
            return NodeSync(name, True, "already", got.pinned)
        if got.daemon is None:
            return NodeSync(
                name, False, "refused", problems=[v.detail], hints=["start Docker there"]
            )
        if got.store != "containerd":
            return NodeSync(
                name,
                False,
                "refused",
                problems=[
                    f"its Docker {got.daemon} keeps images in the classic store, where a loaded "
                    f"image has no registry digest: it could not run {ref.pinned} after a copy"
                ],
                hints=[
                    f"let the nodes pull it: deskside image sync {recipe_file} --from registry",
                    'or turn on the containerd image store there (daemon.json: "features": '
                    '{"containerd-snapshotter": true}; the default from Docker 29)',
                ],
            )
        say(f"{name}: {head} docker save | ssh {name} docker load ({short(head_image.pinned)})")
        t0 = time.monotonic()
        r = ts[head].run(["bash", "-c", STREAM_SH, "sh", ref.pinned, name], timeout=COPY_TIMEOUT)
        took = time.monotonic() - t0
        if not r.ok:
            return NodeSync(
                name,
                False,
                "failed",
                seconds=took,
                problems=[f"the copy failed (exit {r.rc}): {r.stderr.strip()[-300:]}"],
                hints=[f"deskside setup {recipe_file} gives {head} its SSH to {name}"],
            )
        after = read_image(ts[name], image)
        verdict = node_verdict(recipe, name, head_image, after)
        return NodeSync(
            name,
            verdict.ok,
            "loaded" if verdict.ok else "failed",
            after.pinned,
            took,
            head_image.size,
            [] if verdict.ok else [f"after the copy: {verdict.detail}"],
        )

    out += list(at_once(workers, copy).values())
    return head_image, out

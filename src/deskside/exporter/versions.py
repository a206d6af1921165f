"""What the node runs, as the labels of `deskside_versions_info`, read once when the
exporter starts (`deskside.facts.versions`, one round trip on the node):

- `vllm`: the vLLM installed in the engine's Python (native runtimes); in a container, or
  when the running engine's /metrics states a version, the one it states;
- `recipe_vllm`: the recipe's claim, engine.vllm_version (compare the two);
- `deskside`: the exporter's own version; `driver` and `cuda`: the NVIDIA driver and the
  CUDA version it supports; `nccl`: the nvidia-nccl wheel's version in the engine's Python;
  `image_digest`: the engine image's digest when the recipe pins one (`image@sha256:...`).

Anything unknown or not applicable is `series.UNKNOWN`."""

from __future__ import annotations

import sys

from deskside.engine.launch import engine_python as python_of
from deskside.exporter import series
from deskside.facts.base import Fact, Unread, gather
from deskside.facts.versions import HostVersions, host_versions
from deskside.recipe.types import Node, Recipe
from deskside.render.lock import deskside_version, image_digest
from deskside.transport.base import Transport

LABELS = ("deskside", "vllm", "recipe_vllm", "driver", "cuda", "nccl", "image_digest")
READ_TIMEOUT = 60.0


def pinned_digest(image: str | None) -> str | None:
    digest = image_digest(image)
    return digest if digest and digest.startswith("sha256:") else None


def engine_python(recipe: Recipe, node: Node) -> str | None:
    """The engine's Python on this node (None: the engine runs in an image). A deployed
    node's is the recipe's runtime.python, else python3; a node on this machine runs the
    engine with the recipe's, else the Python deskside itself runs in (as
    `deskside.engine.launch.Site` takes them)."""
    if recipe.runtime.kind != "native":
        return None
    return python_of(recipe, here=sys.executable if node.ssh is None else None)


def versions_fact(recipe: Recipe, node: Node) -> Fact[HostVersions]:
    return host_versions(python=engine_python(recipe, node), nccl=None)


def static_versions(recipe: Recipe, found: HostVersions | Unread) -> dict[str, str]:
    """The labels that do not change while the exporter runs."""
    read = found if isinstance(found, HostVersions) else None
    py = read.python if read is not None else None
    values = {
        "deskside": deskside_version(),
        "vllm": py.vllm if py is not None else None,
        "recipe_vllm": recipe.engine.vllm_version,
        "driver": read.driver if read is not None else None,
        "cuda": read.cuda if read is not None else None,
        "nccl": py.nccl_version if py is not None else None,
        "image_digest": pinned_digest(recipe.engine.image),
    }
    return {k: str(v) if v else series.UNKNOWN for k, v in values.items()}


def read_versions(recipe: Recipe, node: Node, host: Transport) -> dict[str, str]:
    """`static_versions` of what `host` (this node) answers."""
    fact = versions_fact(recipe, node)
    found = gather(host, fact, timeout=READ_TIMEOUT).result(fact)
    return static_versions(recipe, found)


def with_engine(versions: dict[str, str], engine_vllm: str | None) -> dict[str, str]:
    """The running engine's stated vLLM in place of the installed one."""
    return {**versions, "vllm": engine_vllm} if engine_vllm else versions

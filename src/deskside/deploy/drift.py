"""What must be the same on every node of a recipe, read from each node in one round trip:
which facts to read (`drift_facts`: the engine's Python and the NCCL library it loads, the
node's clock, its fabric interface), their values as the comparison takes them
(`node_shared`: a container's image stands for its vLLM), every node read at once
(`must_match`), and the refusal `up` gives. The comparison itself is
`deskside.facts.drift.compare`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from deskside.engine.launch import Site, node_env, node_ip
from deskside.errors import DesksideError
from deskside.fabric.nccl import fabric_envs
from deskside.facts.base import Fact, Gathered, Unread, gather
from deskside.facts.clock import NodeClock
from deskside.facts.clock import clock as clock_fact
from deskside.facts.drift import (
    Difference,
    NodeShared,
    Shared,
    compare,
    measured,
    refusal,
    shared,
)
from deskside.facts.network import Link, interface_for_address, links
from deskside.facts.versions import HostVersions, NcclSearch, host_versions
from deskside.recipe.types import Node, Recipe
from deskside.render.lock import image_digest
from deskside.transport.base import Transport

TIMEOUT = 120.0  # the NCCL library's sha256 reads a few hundred megabytes


def default_site(recipe: Recipe, recipe_path: Path) -> Site:
    """Where the engines run: deployed nodes, or this machine for a recipe without ssh:."""
    if any(n.ssh is not None for n in recipe.cluster.nodes):
        return Site.deployed(recipe, recipe_path)
    return Site.this_machine(recipe, recipe_path, sys.executable, str(recipe_path.parent))


def versions_fact(
    recipe: Recipe, engine_env: Mapping[str, str], python: str, *, nccl: bool
) -> Fact[HostVersions]:
    """The node's versions as the engine sees them: its Python on the node natively (in a
    container both Python and NCCL come with the image); the NCCL library when `nccl`."""
    native = recipe.runtime.kind == "native"
    search = NcclSearch(
        engine_env.get("VLLM_NCCL_SO_PATH", ""), engine_env.get("LD_LIBRARY_PATH", "")
    )
    return host_versions(
        python=python if native else None, nccl=search if native and nccl else None
    )


@dataclass(frozen=True)
class DriftFacts:
    """The facts `node_shared` reads on a node."""

    versions: Fact[HostVersions]
    clock: Fact[NodeClock]
    links: Fact[dict[str, Link]]

    def all(self) -> list[Fact[Any]]:
        return [self.versions, self.clock, self.links]


def drift_facts(
    recipe: Recipe, node: Node, engine_env: Mapping[str, str], python: str
) -> DriftFacts:
    iface = node.fabric.interface if node.fabric else None
    versions = versions_fact(recipe, engine_env, python, nccl=True)
    return DriftFacts(versions, clock_fact(), links(iface))


def node_shared(recipe: Recipe, node: Node, got: Gathered, facts: DriftFacts) -> Shared:
    """The values of `facts` as compared. The fabric interface is the recipe's, else the
    one carrying the node's address, as `deskside fabric check` picks it. In a container
    the image pins vLLM (and the NCCL it loads): its digest stands for it."""
    found = got.result(facts.links)
    iface = node.fabric.interface if node.fabric else None
    if iface is None and not isinstance(found, Unread):
        iface = interface_for_address(found, node_ip(node))
    versions = got.result(facts.versions)
    values = shared(versions, found, iface)
    if recipe.runtime.kind == "container" and values.kernel is not None:
        image = recipe.engine.image
        values = replace(values, vllm=f"image {image_digest(image) or image}")
    return values


def unreadable(node: str, why: str, hint: str | None = None) -> Difference:
    return Difference(
        kind="unreachable",
        node=node,
        what=f"{node} could not be read: {why}",
        severity="problem",
        fix=hint or f"check that {node} is up and reachable (ssh), then run doctor again",
    )


def read_node(
    recipe: Recipe,
    node: Node,
    t: Transport,
    facts: DriftFacts,
    clock: Callable[[], float] = time.time,
) -> NodeShared | Difference:
    """`facts` on `node` in one round trip, and the node's values; an `unreachable`
    difference when the node cannot be read, or its versions cannot."""
    try:
        sent = clock()
        got = gather(t, *facts.all(), timeout=TIMEOUT)
        received = clock()
    except DesksideError as exc:
        return unreadable(node.name, exc.message, exc.hint)
    versions = got.result(facts.versions)
    if isinstance(versions, Unread):
        return unreadable(node.name, f"its versions: {versions.reason}")
    return shared_of(recipe, node, got, facts, sent, received)


def shared_of(
    recipe: Recipe, node: Node, got: Gathered, facts: DriftFacts, sent: float, received: float
) -> NodeShared:
    """The node's values and clock from a round trip sent and received at those times."""
    values = node_shared(recipe, node, got, facts)
    clock = got.result(facts.clock)
    return measured(node.name, values, clock, sent, received)


def must_match(
    recipe: Recipe,
    recipe_path: Path,
    transports: Mapping[str, Transport],
    *,
    site: Site | None = None,
    clock: Callable[[], float] = time.time,
) -> list[Difference]:
    """Read every node (in parallel) and compare; a node that cannot be read is a problem
    naming it. One node: nothing to compare."""
    nodes = recipe.cluster.nodes
    if len(nodes) < 2:
        return []
    site = site or default_site(recipe, recipe_path)
    envs = {n: dict(f.env) for n, f in fabric_envs(recipe).items()}

    def read(node: Node) -> NodeShared | Difference:
        env = node_env(recipe, node, site, envs[node.name])
        facts = drift_facts(recipe, node, env, site.python)
        return read_node(recipe, node, transports[node.name], facts, clock)

    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        results = list(pool.map(read, nodes))
    failed = [r for r in results if isinstance(r, Difference)]
    return failed + compare([r for r in results if isinstance(r, NodeShared)])


def up_refusal(
    differences: Sequence[Difference], recipe_path: Path
) -> tuple[list[Difference], list[str]]:
    """`facts.drift.refusal`, each problem pointing at `deskside doctor` for the whole list."""
    return refusal(
        differences, f"`deskside doctor {recipe_path}` shows everything the nodes must share"
    )

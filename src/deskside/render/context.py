"""What every artefact family needs, derived once per render: where things live on a node
(`deskside.layout.NodeLayout`), each node's launch (`deskside.engine.launch`) and the
services beside the engines (`deskside.engine.services`), never re-derived here.

`deskside.render` is pure: nothing here reads files, the environment or the clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from deskside.compose_cli import compose_argv
from deskside.engine.launch import NodeLaunch, Site, launches, node_ip
from deskside.engine.services import Service, ServiceSite, services
from deskside.errors import UsageError
from deskside.layout import NodeLayout
from deskside.planner.plan import Plan
from deskside.recipe.credentials import secret_env_name
from deskside.recipe.types import Node, Recipe
from deskside.render.bundle import CLUSTER_DIR

CONTAINER_HOME_CACHE = "/root/.cache"
"""Where the engine container keeps vLLM's and FlashInfer's default caches."""

LAUNCH_IN_CONTAINER = "/deskside/launch.sh"
"""Where compose mounts the node's launch.sh inside the engine container."""

# Environment names that carry credentials. They never go into a rendered file (the
# bundle is hashed into the lock and often committed); keep tokens in files on the nodes.


def printable_name(name: str) -> str:
    """A file name safe to print in a comment line of any rendered format."""
    return re.sub(r"[^\x20-\x7e]", "?", name)


def secret_env_names(recipe: Recipe) -> list[str]:
    names = [*recipe.engine.env, *recipe.cluster.fabric.nccl_env]
    return sorted({n for n in names if secret_env_name(n)})


@dataclass(frozen=True)
class NodeContext:
    node: Node
    launch: NodeLaunch

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        return self.launch.env

    @property
    def gid_at_launch(self) -> bool:
        return self.launch.gid_at_launch


@dataclass(frozen=True)
class RenderContext:
    recipe: Recipe
    recipe_file: str  # the recipe's file name (no folder: the bundle is machine-independent)
    recipe_dir: Path  # where the loader resolved relative model paths (never rendered)
    plan: Plan
    layout: NodeLayout
    site: Site
    nodes: tuple[NodeContext, ...]  # recipe order
    service_site: ServiceSite
    services: tuple[Service, ...]  # the processes beside the engines (`deskside.engine.services`)

    @property
    def model(self) -> str:
        return self.site.model

    @property
    def head(self) -> NodeContext:
        return next(n for n in self.nodes if n.node.role == "head")

    @property
    def api_base(self) -> str:
        """Where the proxy and Prometheus reach the engine's API on the head."""
        url = self.head.launch.probe_url
        assert url is not None  # the head's launch always has one
        return url

    def node_ip(self, node: Node) -> str:
        return node_ip(node)

    def services_of(self, node: str) -> list[Service]:
        """The services node `node` runs, in the order they start."""
        return [s for s in self.services if s.node == node]

    def service(self, node: str, name: str) -> Service:
        return next(s for s in self.services if s.node == node and s.name == name)

    @property
    def memory_max(self) -> int | None:
        """The engine's memory limit on each node: runtime.memory_max, else the hardware's
        memory less the plan's safety floor (None when the profile does not know it)."""
        if self.recipe.runtime.memory_max is not None:
            return self.recipe.runtime.memory_max
        memory = self.plan.memory
        if memory is None or memory.total_bytes <= memory.safety_floor_bytes:
            return None
        return memory.total_bytes - memory.safety_floor_bytes

    def compose(self, project: str, file: str, *verb: str) -> list[str]:
        """A Compose command line with the recipe's Compose program."""
        return compose_argv(self.recipe.runtime.compose, project, file, *verb)


def build_context(recipe: Recipe, recipe_path: Path, plan: Plan) -> RenderContext:
    """Derive everything the artefact families share; refuse recipes that cannot render."""
    for node in recipe.cluster.nodes:
        if node.name == CLUSTER_DIR:
            raise UsageError(
                f"a node is named {CLUSTER_DIR!r}, the bundle's folder for cluster-wide files",
                hint="rename the node",
            )
    secrets = secret_env_names(recipe)
    if secrets:
        raise UsageError(
            "the recipe puts credentials in the engine environment: " + ", ".join(secrets),
            hint="rendered files are hashed into deskside.lock and often committed; keep "
            "tokens in files on the nodes (models are served offline from a pinned revision, "
            "so the engine needs no hub token)",
        )
    site = Site.deployed(recipe, recipe_path)
    by_node = {la.node: la for la in launches(recipe, plan, site)}
    service_site = ServiceSite.deployed(recipe)
    return RenderContext(
        recipe=recipe,
        recipe_file=printable_name(recipe_path.name),
        recipe_dir=recipe_path.parent,
        plan=plan,
        layout=NodeLayout.of(recipe),
        site=site,
        nodes=tuple(NodeContext(n, by_node[n.name]) for n in recipe.cluster.nodes),
        service_site=service_site,
        services=tuple(services(recipe, service_site)),
    )

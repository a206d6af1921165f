"""The recipe: pydantic models for what a user writes in `recipes/*.yaml`.

Every model forbids unknown keys and is frozen. Field descriptions are the documentation
editors show (they become the JSON Schema, see `deskside.recipe.schema`). Validation is
strict about types: YAML already types its scalars, so `port: "8000"` is refused rather
than quietly converted, and `VLLM_USE_BREAKABLE_CUDAGRAPH: 0` must be quoted.

This module is where the models are imported from. They are defined by topic:

- `deskside.recipe.cluster`: Ssh, NodeFabric, Node, Fabric, Cluster;
- `deskside.recipe.serving`: Model, Speculative, Engine, Runtime, Proxy, Monitoring, Guard;
- here: Recipe, the whole file.

One field's value is checked by its type (`deskside.recipe.values`); rules across fields
(`deskside.recipe.rules`) are collected as `Problem`s, each pointing at the field to fix,
and raised together as one `RecipeProblems` (`deskside.recipe.problems`).
`deskside.recipe.load` turns them into located `RecipeError`s; Python callers see an
ordinary pydantic ValidationError.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from deskside.recipe.cluster import Cluster, Fabric, Node, NodeFabric, Ssh
from deskside.recipe.data_parallel_rules import data_parallel_problems
from deskside.recipe.problems import LocPath, Problem, raise_problems
from deskside.recipe.replicas import ReplicaGroup, Replicas, group_nodes, replica_problems
from deskside.recipe.rules import (
    container_image_problems,
    device_problems,
    head_port_problems,
    head_problems,
    netns_problems,
    rank_problems,
    roce_problems,
    unique_node_problems,
)
from deskside.recipe.serving import (
    Engine,
    Guard,
    Model,
    Monitoring,
    Proxy,
    Runtime,
    Speculative,
)
from deskside.recipe.survive import Recover, Survive
from deskside.recipe.text import Text
from deskside.recipe.values import Slug


class Recipe(BaseModel):
    """A deskside recipe: these nodes, this model, this engine profile."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        title="deskside recipe",
    )

    version: Literal[1] = Field(1, description="Recipe format version.")
    name: Slug = Field(description="Name of the deployment (a slug: lowercase, digits, '-').")
    description: Text = Field("", description="Free text describing the recipe.")
    cluster: Cluster = Field(description="The nodes and the fabric between them.")
    model: Model = Field(description="The model to serve.")
    engine: Engine = Field(description="The vLLM engine settings.")
    runtime: Runtime = Field(
        default_factory=Runtime, description="How the engine runs on the nodes."
    )
    proxy: Proxy = Field(default_factory=Proxy, description="Optional LiteLLM proxy.")
    monitoring: Monitoring = Field(
        default_factory=Monitoring, description="Optional Prometheus/Grafana monitoring."
    )
    guard: Guard = Field(
        default_factory=Guard,
        description="Safety limits watched while serving: memory headroom, KV cache usage, "
        "draft acceptance.",
    )
    survive: Survive = Field(
        default_factory=Survive,
        description="Wedge detection (no token while requests run) and the recovery policy "
        "of `deskside watch`.",
    )
    replicas: Replicas | None = Field(
        None,
        description="Several engine groups over cluster.nodes serving the same names behind "
        "one LiteLLM proxy. None: the nodes are one engine.",
    )
    # Set on the recipes `deskside.recipe.groups` derives for each group: the replica
    # set's name. Such a group's engine requires its key (the set's proxy fronts it) but the
    # group runs no proxy of its own. Not a recipe key.
    _replica_set: str | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _rules(self) -> Recipe:
        nodes = self.cluster.nodes
        engine = self.engine
        if self.replicas is None:
            layout = [
                *head_problems(nodes),
                *rank_problems(
                    nodes,
                    nnodes=engine.nnodes,
                    tensor_parallel_size=engine.tensor_parallel_size,
                    pipeline_parallel_size=engine.pipeline_parallel_size,
                    data_parallel_size=engine.data_parallel_size,
                ),
                *data_parallel_problems(nodes, engine, master_port=self.cluster.fabric.master_port),
            ]
        else:
            layout = replica_problems(
                nodes,
                self.replicas,
                recipe_name=self.name,
                nnodes=engine.nnodes,
                ranks=engine.data_parallel_size
                * engine.tensor_parallel_size
                * engine.pipeline_parallel_size,
            )
        if self.replicas is not None and not self.proxy.enabled:
            layout.append(
                Problem(
                    ("proxy", "enabled"),
                    "replicas need the proxy: it spreads every request over the groups",
                    "set proxy.enabled: true",
                    fallback_locs=(("replicas",),),
                )
            )
        raise_problems(
            [
                *layout,
                *unique_node_problems(nodes),
                *device_problems(nodes, device=engine.device),
                *netns_problems(nodes),
                *roce_problems(nodes, transport=self.cluster.fabric.transport),
                *container_image_problems(runtime_kind=self.runtime.kind, image=engine.image),
                *head_port_problems(self._head_ports()),
            ]
        )
        return self

    def _head_ports(self) -> list[tuple[int, LocPath]]:
        """The ports the head node listens on, each with the key that sets it."""
        used: list[tuple[int, LocPath]] = [(self.engine.port, ("engine", "port"))]
        if len(self.cluster.nodes) > 1 or self.engine.nnodes > 1:
            used.append((self.cluster.fabric.master_port, ("cluster", "fabric", "master_port")))
        if self.engine.data_parallel_size > 1:
            used.append((self.engine.data_parallel_rpc_port, ("engine", "data_parallel_rpc_port")))
        if self.proxy.enabled:
            used.append((self.proxy.port, ("proxy", "port")))
        if self.monitoring.enabled:
            used.extend(
                (getattr(self.monitoring, name), ("monitoring", name))
                for name in ("prometheus_port", "grafana_port", "node_exporter_port")
            )
        return used

    @property
    def replica_set(self) -> str | None:
        """The replica set this recipe is a group of (see `_replica_set`), else None."""
        return self._replica_set

    @property
    def engine_keyed(self) -> bool:
        """A proxy fronts the engine, so the head's engine requires its own key: the
        recipe's proxy, or the replica set's for one of its groups."""
        return self.proxy.enabled

    @property
    def runs_proxy(self) -> bool:
        """This recipe's head runs the LiteLLM proxy (not a replica group's: the set runs
        one proxy for all its groups)."""
        return self.proxy.enabled and self._replica_set is None

    @property
    def head(self) -> Node:
        """The head node (runs the API server and rank 0); the first group's with
        replicas."""
        for node in self.cluster.nodes:
            if node.role == "head":
                return node
        raise LookupError("recipe has no head node")  # pragma: no cover - validated

    @property
    def workers(self) -> list[Node]:
        """Every node but the head, in recipe order: the worker nodes (with replicas, the
        other groups' heads too: they get the model from the head like any worker)."""
        head = self.head
        return [node for node in self.cluster.nodes if node is not head]


__all__ = [
    "Cluster",
    "Engine",
    "Fabric",
    "Guard",
    "Model",
    "Monitoring",
    "Node",
    "NodeFabric",
    "Proxy",
    "Recipe",
    "Recover",
    "ReplicaGroup",
    "Replicas",
    "Runtime",
    "Speculative",
    "Ssh",
    "Survive",
    "group_nodes",
]

"""The recipe's `replicas` section: several engine groups serving the same names behind one
LiteLLM proxy, and the rules that tie its groups to `cluster.nodes` and `engine`.

Each group is a whole engine (a head and its workers, `engine.tensor_parallel_size` ×
`engine.pipeline_parallel_size` ranks over `engine.nnodes` nodes) and runs as a cluster of
its own (`deskside.recipe.groups`); the proxy spreads requests over the groups.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from deskside.recipe.cluster import Node
from deskside.recipe.problems import Problem, raise_problems
from deskside.recipe.values import MAX_NODES, MODEL_CONFIG, NodeName

# LiteLLM's router strategies (litellm.types.router.RoutingStrategy, LiteLLM 1.108).
RoutingStrategy = Literal[
    "simple-shuffle", "least-busy", "usage-based-routing-v2", "latency-based-routing"
]


class ReplicaGroup(BaseModel):
    """One engine group: a head and its workers."""

    model_config = MODEL_CONFIG

    name: str = Field(
        pattern=r"^[a-z0-9](?:[a-z0-9-]{0,10}[a-z0-9])?$",
        description="Short name of the group (lowercase letters, digits, '-', at most 12 "
        "characters). The group runs as `<recipe name>-<group name>`.",
    )
    nodes: list[NodeName] = Field(
        min_length=1,
        max_length=MAX_NODES,
        description="The group's nodes by name, from cluster.nodes: exactly one head, the "
        "rest workers.",
    )


class Replicas(BaseModel):
    """Several engine groups serving the same names, behind the LiteLLM proxy."""

    model_config = MODEL_CONFIG

    groups: list[ReplicaGroup] = Field(
        min_length=2,
        max_length=MAX_NODES,
        description="The engine groups. Each is a whole engine (engine.nnodes nodes, "
        "tensor_parallel_size × pipeline_parallel_size ranks); every node of cluster.nodes "
        "belongs to exactly one group.",
    )
    routing_strategy: RoutingStrategy = Field(
        "least-busy",
        description="How LiteLLM picks a group for each request: 'least-busy' (fewest "
        "requests in flight), 'simple-shuffle', 'usage-based-routing-v2' or "
        "'latency-based-routing'.",
    )
    num_retries: int = Field(
        3, ge=0, le=10, description="Retries of a failed request (on another group)."
    )
    allowed_fails: int = Field(
        0,
        ge=0,
        le=100,
        description="Failures a group may have within cooldown_time before it is cooled "
        "down (taken out of the rotation for cooldown_time). 0: at the first failure, so "
        "the retry of a request that met a dead group goes to another one.",
    )
    cooldown_time: float = Field(
        30, ge=1, le=3600, description="Seconds a failing group stays out of the rotation."
    )
    timeout: float = Field(
        600,
        ge=1,
        le=86400,
        description="Seconds a request may take on one group before LiteLLM gives up on "
        "it (and retries on another).",
    )
    health_check_interval: int = Field(
        15,
        ge=0,
        le=3600,
        description="Seconds between LiteLLM's background health checks of every group "
        "(a tiny completion each); a group that fails one is routed around until it passes "
        "again. 0: no background checks (cooldowns only).",
    )

    @model_validator(mode="after")
    def _unique_names(self) -> Replicas:
        seen: dict[str, int] = {}
        problems = []
        for index, group in enumerate(self.groups):
            if group.name in seen:
                problems.append(
                    Problem(
                        ("groups", index, "name"),
                        f"group name {group.name!r} is used by groups[{seen[group.name]}] already",
                        "give every group its own name",
                    )
                )
            seen.setdefault(group.name, index)
        raise_problems(problems)
        return self


def group_nodes(nodes: Sequence[Node], group: ReplicaGroup) -> list[Node]:
    """The group's nodes, in cluster.nodes order (names the rules found)."""
    names = set(group.nodes)
    return [n for n in nodes if n.name in names]


def replica_problems(
    nodes: Sequence[Node],
    replicas: Replicas,
    *,
    recipe_name: str,
    nnodes: int,
    ranks: int,
) -> list[Problem]:
    """Every group names known nodes; every node is in exactly one group; each group has one
    head, engine.nnodes nodes and as many GPUs as the engine has ranks; a group's run name
    fits; groups in network namespaces each have their own /24 network."""
    problems: list[Problem] = []
    by_name = {n.name: n for n in nodes}
    owner: dict[str, int] = {}
    for gi, group in enumerate(replicas.groups):
        at = ("replicas", "groups", gi)
        for ni, name in enumerate(group.nodes):
            if name not in by_name:
                problems.append(
                    Problem(
                        (*at, "nodes", ni),
                        f"group {group.name!r} lists node {name!r}, which cluster.nodes does "
                        "not have",
                        "use a name from cluster.nodes",
                    )
                )
            elif name in owner:
                problems.append(
                    Problem(
                        (*at, "nodes", ni),
                        f"node {name!r} is in group {replicas.groups[owner[name]].name!r} already",
                        "put every node in exactly one group",
                    )
                )
            else:
                owner[name] = gi
        members = group_nodes(nodes, group)
        heads = [n.name for n in members if n.role == "head"]
        if len(heads) != 1:
            problems.append(
                Problem(
                    (*at, "nodes"),
                    f"group {group.name!r} has {len(heads)} heads"
                    + (f" ({', '.join(heads)})" if heads else "")
                    + "; each group needs exactly one (it serves the group's API)",
                    "give each group one node with role: head, the others role: worker",
                )
            )
        if len(group.nodes) != nnodes:
            problems.append(
                Problem(
                    (*at, "nodes"),
                    f"group {group.name!r} has {len(group.nodes)} node(s) but engine.nnodes "
                    f"is {nnodes}: every group is one whole engine",
                    f"list {nnodes} nodes in each group, or set engine.nnodes",
                )
            )
        gpus = sum(n.gpus for n in members)
        # world size = tensor_parallel_size × pipeline_parallel_size per engine
        # (vllm ParallelConfig.__post_init__), one rank per GPU
        if members and gpus != ranks:
            problems.append(
                Problem(
                    (*at, "nodes"),
                    f"group {group.name!r} has {gpus} GPU(s) but the engine has {ranks} "
                    "ranks (tensor_parallel_size × pipeline_parallel_size)",
                    "give every group as many GPUs as the engine has ranks",
                )
            )
        if len(recipe_name) + 1 + len(group.name) > 63:
            problems.append(
                Problem(
                    (*at, "name"),
                    f"the group's run name {recipe_name}-{group.name} is longer than 63 characters",
                    "shorten the recipe's name or the group's",
                )
            )
    for index, node in enumerate(nodes):
        if node.name not in owner:
            problems.append(
                Problem(
                    ("cluster", "nodes", index),
                    f"node {node.name!r} is in no replica group",
                    "add it to one of replicas.groups, or remove it",
                )
            )
    problems += _network_problems(nodes, replicas)
    return problems


def _network_problems(nodes: Sequence[Node], replicas: Replicas) -> list[Problem]:
    """Groups in network namespaces get a bridge each on this machine, which reaches them
    all (the proxy runs there): two groups on one /24 would make two routes to it."""
    seen: dict[ipaddress.IPv4Network, str] = {}
    problems: list[Problem] = []
    for gi, group in enumerate(replicas.groups):
        nets = {
            ipaddress.IPv4Interface(f"{n.fabric.address}/24").network
            for n in group_nodes(nodes, group)
            if n.netns and n.fabric is not None
        }
        for net in sorted(nets):
            if net in seen and seen[net] != group.name:
                problems.append(
                    Problem(
                        ("replicas", "groups", gi, "nodes"),
                        f"group {group.name!r} uses the network {net} of group "
                        f"{seen[net]!r}; groups on this machine each need their own /24",
                        "give each group's fabric addresses their own first three numbers",
                    )
                )
            seen.setdefault(net, group.name)
    return problems


__all__ = ["ReplicaGroup", "Replicas", "RoutingStrategy", "group_nodes", "replica_problems"]

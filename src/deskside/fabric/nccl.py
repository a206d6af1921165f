"""NCCL and Gloo environment per node, from the recipe's fabric choice (pure).

The result plugs into `deskside.engine.launch.node_env` (and
`launch_plan(..., fabric_env={node: env})`); the recipe's own `cluster.fabric.nccl_env`
is applied after it there, so a user can still override any value.

- `roce`: the environment proven on two GB10 nodes (docs/flagship.md #6-#8): NCCL over
  IB verbs on RoCEv2 with IPv4 GIDs. NCCL_IB_GID_INDEX is per node and is only written when
  a resolved index is passed in; otherwise `gid_index_at_launch` is set and the launch
  script must export it (`deskside.fabric.launch_sh`). An empty value is never emitted:
  NCCL would read it as 0, a link-local GID.
- `socket`: NCCL over TCP on the fabric interface, RDMA off. On GPU nodes this gives up
  most of the bandwidth (~20x less than RoCE on two Sparks), so it warns.
- `loopback`: every rank on one host: sockets on `lo`, RDMA off.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from deskside.errors import UsageError
from deskside.recipe.types import Node, Recipe

_CONFIG = ConfigDict(extra="forbid", frozen=True)

GID_INDEX_VAR = "NCCL_IB_GID_INDEX"


class FabricEnv(BaseModel):
    """A node's fabric environment and what still has to happen at launch."""

    model_config = _CONFIG

    node: str
    transport: str
    env: dict[str, str]
    gid_index_at_launch: bool  # the launch script must resolve and export NCCL_IB_GID_INDEX
    warnings: tuple[str, ...]


def nccl_hca_value(hcas: list[str]) -> str:
    """NCCL_IB_HCA with a leading '=': exact device names, so `mlx5_1` does not also
    select `mlx5_10` (NCCL matches prefixes otherwise)."""
    return "=" + ",".join(hcas)


def node_fabric_env(recipe: Recipe, node: Node, gid_index: int | None = None) -> FabricEnv:
    """NCCL/Gloo variables for `node` under the recipe's fabric transport."""
    fabric = recipe.cluster.fabric
    transport = fabric.transport
    env: dict[str, str] = {}
    warnings: list[str] = []
    at_launch = False
    multi_node = len(recipe.cluster.nodes) > 1
    if gid_index is not None and (isinstance(gid_index, bool) or gid_index < 0):
        raise UsageError(f"GID index must be a non-negative integer, not {gid_index!r}")
    if transport == "roce":
        if node.fabric is None or not node.fabric.hcas:  # the recipe rules refuse this
            raise UsageError(
                f"node {node.name}: transport 'roce' needs fabric.interface, address and hcas",
                hint="add fabric: {interface, address, hcas} to the node",
            )
        env.update(
            {
                "NCCL_NET": "IB",
                "NCCL_IB_DISABLE": "0",
                "NCCL_IB_HCA": nccl_hca_value(list(node.fabric.hcas)),
                "NCCL_IB_ROCE_VERSION_NUM": "2",
                "NCCL_IB_ADDR_FAMILY": "AF_INET",
                "NCCL_IGNORE_CPU_AFFINITY": "1",
                "NCCL_SOCKET_IFNAME": node.fabric.interface,
                "GLOO_SOCKET_IFNAME": node.fabric.interface,
            }
        )
        if gid_index is None:
            at_launch = True
        else:
            env[GID_INDEX_VAR] = str(gid_index)
        if GID_INDEX_VAR in fabric.nccl_env:
            warnings.append(
                f"cluster.fabric.nccl_env hardcodes {GID_INDEX_VAR}="
                f"{fabric.nccl_env[GID_INDEX_VAR]!r}: it overrides the per-node resolution, "
                "differs per node (e.g. 7 on one DGX Spark, 3 on the other) and drifts after "
                "reboots; remove it"
            )
    elif transport == "socket":
        iface = node.fabric.interface if node.fabric else None
        env.update({"NCCL_NET": "Socket", "NCCL_IB_DISABLE": "1"})
        if iface:
            env["NCCL_SOCKET_IFNAME"] = iface
            env["GLOO_SOCKET_IFNAME"] = iface
        if multi_node and recipe.engine.device == "gpu":
            warnings.append(
                "fabric transport 'socket': NCCL runs over TCP, giving up the RDMA bandwidth "
                "(on two DGX Sparks ~20x less than RoCE over the ConnectX-7) for every "
                "all-reduce; use transport 'roce' when the nodes have RDMA devices"
            )
    else:  # loopback
        env.update(
            {
                "NCCL_NET": "Socket",
                "NCCL_IB_DISABLE": "1",
                "NCCL_SOCKET_IFNAME": "lo",
                "GLOO_SOCKET_IFNAME": "lo",
            }
        )
        if multi_node:
            warnings.append(
                "fabric transport 'loopback' with several nodes: ranks on other hosts cannot "
                "reach 'lo'; use 'socket' or 'roce'"
            )
    net = fabric.nccl_env.get("NCCL_NET")
    if net is not None and net != env.get("NCCL_NET"):
        warnings.append(
            f"cluster.fabric.nccl_env sets NCCL_NET={net!r}, contradicting transport "
            f"{transport!r} (NCCL_NET={env.get('NCCL_NET')!r}); the recipe's value wins"
        )
    return FabricEnv(
        node=node.name,
        transport=transport,
        env=env,
        gid_index_at_launch=at_launch,
        warnings=tuple(warnings),
    )


def fabric_envs(
    recipe: Recipe, gid_indexes: Mapping[str, int] | None = None
) -> dict[str, FabricEnv]:
    """Every node's fabric environment (node name -> FabricEnv)."""
    indexes = gid_indexes or {}
    return {n.name: node_fabric_env(recipe, n, indexes.get(n.name)) for n in recipe.cluster.nodes}

"""The recipe's nodes and the fabric between them: Ssh, NodeFabric, Node, Fabric, Cluster.

Rules across nodes (one head, unique names and addresses, RDMA devices for RoCE, ...) look
at the whole recipe and live in `deskside.recipe.rules`. Import these models from
`deskside.recipe.types`.
"""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from deskside.hardware import PROFILES
from deskside.recipe.credentials import env_secret_problems
from deskside.recipe.problems import Problem, raise_problems
from deskside.recipe.text import Text
from deskside.recipe.values import (
    MAX_GPUS_PER_NODE,
    MAX_LIST,
    MAX_NODES,
    MODEL_CONFIG,
    EnvName,
    HardwareName,
    HcaName,
    HostAddress,
    InterfaceName,
    NetnsName,
    NodeName,
    NoSpace,
    Port,
    UserName,
)


class Ssh(BaseModel):
    """How deskside reaches a node over SSH."""

    model_config = MODEL_CONFIG

    user: UserName = Field("root", description="Login user on the node.")
    port: Port = Field(22, description="SSH port on the node.")
    identity_file: NoSpace | None = Field(
        None,
        description="Private key file on the machine running deskside (e.g. "
        "~/.ssh/id_ed25519). None: the SSH agent and ~/.ssh/config decide.",
    )


class NodeFabric(BaseModel):
    """The node's side of the fast GPU-to-GPU fabric (RoCE or a dedicated link)."""

    model_config = MODEL_CONFIG

    interface: InterfaceName = Field(
        description="Network interface (netdev) carrying the fabric, as `ip link` names it, "
        "e.g. enp1s0f0np0. Becomes NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME."
    )
    address: IPv4Address = Field(
        strict=False,
        description="This node's IPv4 address on the fabric interface. RoCEv2 GID "
        "resolution picks the GID entry carrying it.",
    )
    hcas: list[HcaName] = Field(
        default_factory=list,
        max_length=16,
        description="RDMA devices (from /sys/class/infiniband) NCCL may use, e.g. "
        "[rocep1s0f0, rocep1s0f1]. Becomes NCCL_IB_HCA. Required for transport 'roce'.",
    )

    @model_validator(mode="after")
    def _unique_hcas(self) -> NodeFabric:
        seen: set[str] = set()
        problems = []
        for index, hca in enumerate(self.hcas):
            if hca in seen:
                problems.append(
                    Problem(("hcas", index), f"RDMA device {hca!r} is listed twice", "list it once")
                )
            seen.add(hca)
        raise_problems(problems)
        return self


class Node(BaseModel):
    """One machine of the cluster."""

    model_config = MODEL_CONFIG

    name: NodeName = Field(description="Short name of the node (e.g. ai1), used in logs and files.")
    address: HostAddress = Field(
        description="Management/API address of the node: an IPv4 address or a hostname. "
        "deskside connects here (SSH) and the head serves the API here."
    )
    role: Literal["head", "worker"] = Field(
        description="'head' runs the API server and rank 0 (exactly one node); 'worker' runs "
        "headless engine ranks."
    )
    hardware: HardwareName = Field(
        description="Hardware profile: the node's device memory and what vLLM runs on. One "
        "of: " + ", ".join(PROFILES) + "."
    )
    gpus: int = Field(
        1, ge=1, le=MAX_GPUS_PER_NODE, description="Engine ranks (GPUs) on this node."
    )
    ssh: Ssh | None = Field(
        None, description="How to reach the node over SSH. None: the node is this machine."
    )
    netns: NetnsName | None = Field(
        None,
        description="Run this node in a network namespace of this machine (created by "
        "deskside with the node's fabric address on a veth joined to a local bridge), so a "
        "multi-node cluster can run on one host with real interfaces between the nodes.",
    )
    fabric: NodeFabric | None = Field(
        None,
        description="The node's fabric interface and address for NCCL/Gloo. None: the "
        "management address is used.",
    )


class Fabric(BaseModel):
    """How the engine ranks talk to each other across nodes."""

    model_config = MODEL_CONFIG

    transport: Literal["roce", "socket", "loopback"] = Field(
        "socket",
        description="'roce': NCCL over RDMA (NCCL_NET=IB, RoCEv2); 'socket': NCCL over TCP; "
        "'loopback': every rank on one host.",
    )
    mtu: int | None = Field(
        None,
        ge=576,
        le=9216,
        description="Expected MTU of the fabric interfaces (e.g. 9000 for jumbo frames); "
        "checked by the fabric probes. None: not checked.",
    )
    master_port: Port = Field(
        25000, description="TCP port of the torch.distributed rendezvous on the head node."
    )
    nccl_env: dict[EnvName, Text] = Field(
        default_factory=dict,
        max_length=MAX_LIST,
        description="Extra NCCL_*/GLOO_* environment variables, added after the ones deskside "
        "derives from the transport. Values are strings (quote numbers).",
    )

    @model_validator(mode="after")
    def _no_credentials(self) -> Fabric:
        raise_problems(env_secret_problems(self.nccl_env, ("nccl_env",)))
        return self


class Cluster(BaseModel):
    """The machines and the fabric between them."""

    model_config = MODEL_CONFIG

    nodes: list[Node] = Field(
        min_length=1,
        max_length=MAX_NODES,
        description="The nodes, head first by convention; exactly one head.",
    )
    fabric: Fabric = Field(
        default_factory=Fabric, description="The fabric connecting the engine ranks."
    )


__all__ = ["Cluster", "Fabric", "Node", "NodeFabric", "Ssh"]

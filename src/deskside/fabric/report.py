"""The models of `deskside fabric check`: its options, one gate's verdict, each node's
facts, the bandwidth probes' reports and the whole report (JSON-ready, frozen)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from deskside.fabric import probe
from deskside.fabric.gid import NodeResolution
from deskside.units import MIB

_CONFIG = ConfigDict(extra="forbid", frozen=True)

Status = Literal["pass", "warn", "fail", "skip"]
Progress = Callable[[str], None]

DEFAULT_MIN_FRACTION = {"gloo": 0.10, "nccl": 0.75}


class CheckOptions(BaseModel):
    """Knobs of `check_fabric` (the CLI's flags)."""

    model_config = _CONFIG

    python: str | None = Field(
        None, description="Interpreter with torch on the nodes (None: runtime.python, else ours)."
    )
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    port: int | None = Field(
        None, description="Rendezvous port (None: cluster.fabric.master_port)."
    )
    size_bytes: int = 64 * MIB
    iterations: int = 5
    warmup: int = 2
    min_fraction: float | None = Field(
        None, description="Pass threshold: bus bandwidth / link rate (None: per backend)."
    )
    min_busbw_gbps: float | None = None
    timeout: float = 120.0
    ping_count: int = 3
    bandwidth: bool = True
    ib_write_bw: bool = True
    sysfs_root: str = "/sys"


class Gate(BaseModel):
    model_config = _CONFIG

    gate: str
    status: Status
    node: str | None = None
    peer: str | None = None
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


class NodeFacts(BaseModel):
    model_config = _CONFIG

    name: str
    role: str
    rank: int
    transport: str
    interface: str | None
    address: str
    exists: bool
    up: bool
    operstate: str | None
    mtu: int | None
    ipv4: tuple[str, ...]
    speed_gbps: float | None
    rdma: NodeResolution | None = None
    perftest: bool | None = None
    error: str | None = None


class AllReduceReport(BaseModel):
    model_config = _CONFIG

    backend: str
    world_size: int
    master: str
    size_bytes: int
    iterations: int
    seconds_per_iteration: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    link_gbps: float | None
    fraction_of_link: float | None
    min_fraction: float
    min_busbw_gbps: float | None
    correct: bool | None
    ranks: tuple[probe.AllReduceRank, ...]


class IbWriteBwReport(BaseModel):
    model_config = _CONFIG

    server: str
    client: str
    device: str
    port: int
    bw_gbps: float | None
    link_gbps: float | None
    fraction_of_link: float | None


class CheckReport(BaseModel):
    model_config = _CONFIG

    recipe: str
    transport: str
    ok: bool
    nodes: tuple[NodeFacts, ...]
    gates: tuple[Gate, ...]
    allreduce: AllReduceReport | None
    ib_write_bw: tuple[IbWriteBwReport, ...]
    seconds: float

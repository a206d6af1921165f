"""What `deskside top` shows, as data: one `Snapshot` of the cluster built from readings
(`deskside.monitor.readings`), with no I/O, so it is tested on recorded expositions.

Per node: memory available, the plan's floor and the headroom between them (available -
floor, in bytes; negative means the node is below its floor), the GPUs (or none), the
fabric's bytes per second (RDMA port counters, or without RDMA the node's fabric
interface) with its error and congestion counters, and the RoCE GID index and drift.
Engine: KV cache usage, running and waiting requests, generated tokens per second,
speculative acceptance per draft position (accepted at that position / drafts, since the
engine started), and seconds since the last token.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel

from deskside.exporter import series
from deskside.monitor.prom_api import Alert, Sample
from deskside.monitor.readings import Readings

RDMA_RX = "node_infiniband_port_data_received_bytes_total"
RDMA_TX = "node_infiniband_port_data_transmitted_bytes_total"
NET_RX = "node_network_receive_bytes_total"
NET_TX = "node_network_transmit_bytes_total"
NET_COUNTERS = (
    "node_network_receive_errs_total",
    "node_network_transmit_errs_total",
    "node_network_receive_drop_total",
    "node_network_transmit_drop_total",
)
# node_exporter's infiniband counters (and RoCE hw counters) that mean trouble
TROUBLE = re.compile(r"error|discard|drop|cnp|ecn|congest|overrun|downed|recovery|integrity")


class NodeSpec(BaseModel):
    """A node as the run knows it."""

    name: str
    role: str
    address: str
    fabric_interface: str | None = None


class GpuView(BaseModel):
    gpu: str
    utilization: float | None = None  # 0-1
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_watts: float | None = None
    temperature_celsius: float | None = None


class FabricView(BaseModel):
    kind: str  # rdma: RDMA port counters; interface: the fabric interface's counters
    devices: list[str]  # rdma: device:port; interface: the interface name
    rx_bytes_per_s: float | None = None
    tx_bytes_per_s: float | None = None
    counters: dict[str, float] = {}  # error/congestion counter totals, summed over devices


class NodeView(BaseModel):
    name: str
    role: str
    memory_total_bytes: float | None = None
    memory_available_bytes: float | None = None
    memory_floor_bytes: float | None = None
    headroom_bytes: float | None = None  # available - floor
    below_floor: bool | None = None
    gpu_present: bool | None = None  # None: deskside's exporter did not say
    gpus: list[GpuView] = []
    fabric: FabricView | None = None
    gid_index: int | None = None
    gid_launched_index: int | None = None
    gid_drift: bool | None = None


class PositionView(BaseModel):
    position: int
    acceptance: float  # accepted tokens at this position / drafts


class EngineView(BaseModel):
    up: bool | None = None
    kv_cache_usage: float | None = None  # 0-1
    requests_running: float | None = None
    requests_waiting: float | None = None
    generation_tokens_per_s: float | None = None
    spec_acceptance: float | None = None  # accepted / drafted tokens
    spec_acceptance_per_position: list[PositionView] = []
    seconds_since_last_token: float | None = None


class AlertView(BaseModel):
    name: str
    state: str
    node: str | None = None
    summary: str | None = None


class Snapshot(BaseModel):
    recipe: str | None
    source: str  # prometheus | endpoints
    taken_at: str  # ISO 8601, UTC
    nodes: list[NodeView]
    engine: EngineView
    alerts: list[AlertView] | None  # None: unknown (no Prometheus)
    notes: list[str] = []


def _of(samples: Iterable[Sample], node: str | None = None, **match: str) -> list[Sample]:
    return [
        s
        for s in samples
        if s.is_number
        and (node is None or s.labels.get("node") == node)
        and all(s.labels.get(k) == v for k, v in match.items())
    ]


def _sum(samples: list[Sample]) -> float | None:
    return sum(s.value for s in samples) if samples else None


def _max(samples: list[Sample]) -> float | None:
    return max(s.value for s in samples) if samples else None


def _first(r: Readings, names: tuple[str, ...], node: str) -> float | None:
    for name in names:
        value = _sum(_of(r.values(name), node))
        if value is not None:
            return value
    return None


def _gpus(r: Readings, node: str) -> list[GpuView]:
    fields = {
        "utilization": series.GPU_UTILIZATION,
        "memory_used_bytes": series.GPU_MEMORY_USED,
        "memory_total_bytes": series.GPU_MEMORY_TOTAL,
        "power_watts": series.GPU_POWER,
        "temperature_celsius": series.GPU_TEMPERATURE,
    }
    gpus: dict[str, dict[str, float]] = {}
    for attr, name in fields.items():
        for s in _of(r.values(name), node):
            gpus.setdefault(s.labels.get("gpu", "0"), {})[attr] = s.value
    return [GpuView(gpu=g, **values) for g, values in sorted(gpus.items())]


def _fabric(r: Readings, spec: NodeSpec) -> FabricView | None:
    rdma = _of(r.values(RDMA_RX), spec.name)
    if rdma:
        devices = sorted(
            {f"{s.labels.get('device', '?')}:{s.labels.get('port', '?')}" for s in rdma}
        )
        counters = {}
        for name in sorted(r.names()):
            if name.startswith("node_infiniband_") and TROUBLE.search(name):
                total = _sum(_of(r.values(name), spec.name))
                if total is not None:
                    counters[name.removeprefix("node_infiniband_")] = total
        return FabricView(
            kind="rdma",
            devices=devices,
            rx_bytes_per_s=_sum(_of(r.rates(RDMA_RX), spec.name)),
            tx_bytes_per_s=_sum(_of(r.rates(RDMA_TX), spec.name)),
            counters=counters,
        )
    iface = spec.fabric_interface
    if iface is None or not _of(r.values(NET_RX), spec.name, device=iface):
        return None
    counters = {}
    for name in NET_COUNTERS:
        total = _sum(_of(r.values(name), spec.name, device=iface))
        if total is not None:
            counters[name.removeprefix("node_network_")] = total
    return FabricView(
        kind="interface",
        devices=[iface],
        rx_bytes_per_s=_sum(_of(r.rates(NET_RX), spec.name, device=iface)),
        tx_bytes_per_s=_sum(_of(r.rates(NET_TX), spec.name, device=iface)),
        counters=counters,
    )


def node_view(r: Readings, spec: NodeSpec) -> NodeView:
    node = spec.name
    available = _first(r, (series.MEMORY_AVAILABLE, "node_memory_MemAvailable_bytes"), node)
    total = _first(r, (series.MEMORY_TOTAL, "node_memory_MemTotal_bytes"), node)
    floor = _first(r, (series.MEMORY_FLOOR,), node)
    headroom = available - floor if available is not None and floor is not None else None
    present = _max(_of(r.values(series.GPU_PRESENT), node))
    gid = _of(r.values(series.GID_INDEX), node)
    launched = _of(r.values(series.GID_LAUNCHED), node)
    drift = _max(_of(r.values(series.GID_DRIFT), node))
    return NodeView(
        name=node,
        role=spec.role,
        memory_total_bytes=total,
        memory_available_bytes=available,
        memory_floor_bytes=floor,
        headroom_bytes=headroom,
        below_floor=headroom < 0 if headroom is not None else None,
        gpu_present=present > 0 if present is not None else None,
        gpus=_gpus(r, node),
        fabric=_fabric(r, spec),
        gid_index=int(gid[0].value) if gid else None,
        gid_launched_index=int(launched[0].value) if launched else None,
        gid_drift=drift > 0 if drift is not None else None,
    )


def _per_position(r: Readings) -> list[PositionView]:
    drafts = _sum(_of(r.values("vllm:spec_decode_num_drafts_total")))
    if not drafts:
        return []
    accepted: dict[int, float] = {}
    for s in _of(r.values("vllm:spec_decode_num_accepted_tokens_per_pos_total")):
        try:
            pos = int(s.labels.get("position", ""))
        except ValueError:
            continue
        accepted[pos] = accepted.get(pos, 0.0) + s.value
    return [PositionView(position=p, acceptance=a / drafts) for p, a in sorted(accepted.items())]


def engine_view(r: Readings) -> EngineView:
    up = _max(_of(r.values(series.ENGINE_UP)))
    kv = _max(_of(r.values("vllm:kv_cache_usage_perc")))
    accepted = _sum(_of(r.values("vllm:spec_decode_num_accepted_tokens_total")))
    drafted = _sum(_of(r.values("vllm:spec_decode_num_draft_tokens_total")))
    tokens = _of(r.rates("vllm:generation_tokens_total"))
    if not tokens:
        tokens = _of(r.rates(series.ENGINE_TOKENS))
    if up is None:  # no exporter: Prometheus's scrape of the engine, else its answer
        up = _max(_of(r.values('up{job="vllm"}'))) if r.source == "prometheus" else None
    running = _sum(_of(r.values("vllm:num_requests_running")))
    if up is None and (kv is not None or running is not None):
        up = 1.0
    return EngineView(
        up=up > 0 if up is not None else None,
        kv_cache_usage=kv,
        requests_running=running,
        requests_waiting=_sum(_of(r.values("vllm:num_requests_waiting"))),
        generation_tokens_per_s=_sum(tokens),
        spec_acceptance=accepted / drafted if accepted is not None and drafted else None,
        spec_acceptance_per_position=_per_position(r),
        seconds_since_last_token=_max(_of(r.values(series.ENGINE_SINCE_TOKEN))),
    )


def alert_views(alerts: list[Alert]) -> list[AlertView]:
    return [
        AlertView(name=a.name, state=a.state, node=a.labels.get("node"), summary=a.summary)
        for a in sorted(alerts, key=lambda a: (a.state != "firing", a.name))
    ]


def build_snapshot(
    r: Readings,
    nodes: list[NodeSpec],
    *,
    recipe: str | None,
    taken_at: str,
    alerts: list[Alert] | None = None,
    notes: list[str] | None = None,
) -> Snapshot:
    return Snapshot(
        recipe=recipe,
        source=r.source,
        taken_at=taken_at,
        nodes=[node_view(r, spec) for spec in nodes],
        engine=engine_view(r),
        alerts=alert_views(alerts) if alerts is not None else None,
        notes=notes or [],
    )

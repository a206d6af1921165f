"""One scrape, one fresh collection: `NodeCollector` reads every source of the node each
time Prometheus asks (meminfo and the memory cgroup, sysfs, the engine process, NVML, the
engine's /metrics) and yields the deskside_* families; the node's versions are read once,
when it starts. Register it on its own CollectorRegistry."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from deskside.errors import DesksideError
from deskside.exporter import roce, series
from deskside.exporter.cluster import cluster_series, read_record
from deskside.exporter.engine import EngineReading, Fetch, HttpFetch, Progress, read_engine
from deskside.exporter.gpu import Nvml, read_gpus
from deskside.exporter.memory import floor_bytes
from deskside.exporter.running import EngineFinder
from deskside.exporter.versions import LABELS, read_versions, with_engine
from deskside.facts.memory import read_available, read_meminfo
from deskside.recipe.types import Node, Recipe
from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport


class GuardReadings(Protocol):
    """What the exporter serves of a memory guard running beside it (the exporter only
    reads it: the guard, which stops engines, is started by whoever runs both)."""

    @property
    def window(self) -> float: ...

    @property
    def stops(self) -> int: ...

    def low_seconds(self) -> float: ...


@dataclass
class Sources:
    """Where one node's readings come from."""

    recipe: Recipe
    recipe_path: Path
    node: Node
    sysfs_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")
    engine_url: str | None = None  # the engine's /metrics; None: not scraped (workers)
    fetch: Fetch = field(default_factory=HttpFetch)
    nvml: Nvml | None = None
    clock: Callable[[], float] = time.monotonic
    once: bool = False  # a single collection: no memory between samples
    warn: Callable[[str], None] = field(default=lambda message: None)
    cgroup: Path | None = None  # the watched scope's memory cgroup folder (deskside.guard)
    guardian: GuardReadings | None = None  # the guard, when the recipe enforces it
    state_dir: Path | None = None  # the node's state folder (the watcher's survive.json)
    host: Transport = field(default_factory=LocalTransport)  # this node: files, versions


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


class NodeCollector(Collector):
    """The deskside_* series of one node of a recipe."""

    def __init__(self, sources: Sources) -> None:
        self.s = sources
        self.node = sources.node.name
        self.floor = floor_bytes(sources.recipe, sources.recipe_path, sources.node)
        self.versions = read_versions(sources.recipe, sources.node, sources.host)
        self.finder = EngineFinder(sources.proc_root, sources.recipe.name, self.node)
        self.progress = Progress(sources.clock, once=sources.once)
        self._lock = threading.Lock()  # concurrent scrapes share the progress memory
        self._warned: set[str] = set()

    def _warn(self, message: str) -> None:
        if message not in self._warned:  # once per distinct problem, not every scrape
            self._warned.add(message)
            self.s.warn(message)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            yield from self._memory_and_gpus()
            yield from self._roce()
            engine = None
            if self.s.engine_url is not None:
                engine = read_engine(self.s.engine_url, self.s.fetch)
                yield from self._engine_series(engine, self.progress.observe(engine))
            if self.s.state_dir is not None and self.s.node.role == "head":
                record = read_record(self.s.state_dir)
                if record is not None:
                    yield from cluster_series(self.node, record)
            vllm = engine.vllm_version if engine else None
            info = InfoMetricFamily(
                series.VERSIONS.removesuffix("_info"),
                "Versions on this node: deskside, the vLLM installed (or the running engine's), "
                "the recipe's vLLM, NVIDIA driver, CUDA, NCCL, engine image digest "
                f"({series.UNKNOWN!r}: unknown or not applicable).",
                labels=["node"],
            )
            versions = with_engine(self.versions, vllm)
            info.add_metric([self.node], {k: versions[k] for k in LABELS})
            yield info

    def _memory_and_gpus(self) -> Iterator[Metric]:
        n = [self.node]
        mem = read_meminfo(self.s.host, str(self.s.proc_root))
        if mem is None:
            self._warn(f"{self.s.proc_root / 'meminfo'}: unreadable or without MemAvailable")
        else:
            total = _gauge(series.MEMORY_TOTAL, "MemTotal of the node, bytes.", ["node"])
            total.add_metric(n, mem.total_bytes)
            avail = _gauge(series.MEMORY_AVAILABLE, "MemAvailable of the node, bytes.", ["node"])
            avail.add_metric(n, mem.available_bytes)
            yield from (total, avail)
        floor = _gauge(
            series.MEMORY_FLOOR,
            "The plan's safety floor: memory the plan keeps outside vLLM on the node, bytes.",
            ["node"],
        )
        floor.add_metric(n, self.floor)
        yield floor
        yield from self._guard()
        gpus = read_gpus(self.s.nvml, mem)
        present = _gauge(series.GPU_PRESENT, "GPUs NVML sees on the node (0: no GPU).", ["node"])
        present.add_metric(n, len(gpus))
        yield present
        families = {
            "memory_used_bytes": _gauge(
                series.GPU_MEMORY_USED,
                "GPU memory in use, bytes (unified-memory GPUs: MemTotal - MemAvailable).",
                ["node", "gpu"],
            ),
            "memory_total_bytes": _gauge(
                series.GPU_MEMORY_TOTAL,
                "GPU memory, bytes (unified-memory GPUs: MemTotal).",
                ["node", "gpu"],
            ),
            "utilization": _gauge(
                series.GPU_UTILIZATION, "GPU busy fraction, 0-1 (NVML).", ["node", "gpu"]
            ),
            "power_watts": _gauge(series.GPU_POWER, "GPU power draw, watts.", ["node", "gpu"]),
            "temperature_celsius": _gauge(
                series.GPU_TEMPERATURE, "GPU temperature, degrees Celsius.", ["node", "gpu"]
            ),
        }
        for gpu in gpus:
            for attr, family in families.items():
                value = getattr(gpu, attr)
                if value is not None:
                    family.add_metric([self.node, str(gpu.index)], value)
        yield from (f for f in families.values() if f.samples)

    def _guard(self) -> Iterator[Metric]:
        n = [self.node]
        cgroup = str(self.s.cgroup) if self.s.cgroup is not None else None
        available = read_available(self.s.host, str(self.s.proc_root), cgroup).available
        if available is not None:
            gauge = _gauge(
                series.GUARD_AVAILABLE,
                "Memory the guard compares with the floor: the smaller of MemAvailable and "
                "the node's memory cgroup headroom (limit less working set), bytes.",
                ["node"],
            )
            gauge.add_metric(n, available)
            yield gauge
        guardian = self.s.guardian
        if guardian is None:
            return
        low = _gauge(
            series.GUARD_LOW_SECONDS,
            "Seconds available memory has stayed under the floor (0: over it).",
            ["node"],
        )
        low.add_metric(n, guardian.low_seconds())
        window = _gauge(
            series.GUARD_WINDOW,
            "guard.window: seconds under the floor after which the guard stops the engine.",
            ["node"],
        )
        window.add_metric(n, guardian.window)
        stops = CounterMetricFamily(
            series.GUARD_STOPS,
            "Times the guard stopped the node's engine since the exporter started.",
            labels=["node"],
        )
        stops.add_metric(n, guardian.stops)
        yield from (low, window, stops)

    def _roce(self) -> Iterator[Metric]:
        node = self.s.node
        if not roce.applies(self.s.recipe, node) or node.fabric is None:
            return
        try:
            resolution = roce.resolve(self.s.sysfs_root, node)
        except DesksideError as exc:
            self._warn(f"RoCE GID index: {exc.message}")
            return
        if resolution is None:  # no RDMA device on this node
            return
        engine = self.finder()
        reading = roce.reading(resolution, node.fabric.hcas, engine.env if engine else None)
        if reading.error:
            self._warn(f"RoCE GID index: {reading.error}")
        index = _gauge(
            series.GID_INDEX,
            "RoCEv2 GID index the node's fabric address resolves to now (sysfs).",
            ["node", "device", "port"],
        )
        for p in reading.ports:
            index.add_metric([self.node, p.device, str(p.port)], p.gid_index)
        if index.samples:
            yield index
        if not reading.drifts:  # no engine running: nothing to compare
            return
        launched = _gauge(
            series.GID_LAUNCHED,
            "NCCL_IB_GID_INDEX the running engine was started with.",
            ["node", "device"],
        )
        drift = _gauge(
            series.GID_DRIFT,
            "1: the running engine's GID index is not the one sysfs gives now; 0: same.",
            ["node", "device"],
        )
        for d in reading.drifts:
            if d.launched is not None:
                launched.add_metric([self.node, d.device], d.launched)
            drift.add_metric([self.node, d.device], 1 if d.drift else 0)
        if launched.samples:
            yield launched
        yield drift

    def _engine_series(self, reading: EngineReading, since: float | None) -> Iterator[Metric]:
        n = [self.node]
        up = _gauge(series.ENGINE_UP, "1: the engine's /metrics answered this scrape.", ["node"])
        up.add_metric(n, 1 if reading.up else 0)
        yield up
        if reading.error is not None:
            error = _gauge(
                series.ENGINE_ERROR,
                "1: why the engine's /metrics gave nothing this scrape (refused, deadline, "
                "too_large, http_status, transport, no_answer).",
                ["node", "reason"],
            )
            error.add_metric([*n, reading.error], 1)
            yield error
        if reading.tokens is not None:
            tokens = CounterMetricFamily(
                series.ENGINE_TOKENS,
                "Tokens the engine generated (vllm:generation_tokens_total, summed).",
                labels=["node"],
            )
            tokens.add_metric(n, reading.tokens)
            yield tokens
        if reading.running is not None:
            running = _gauge(
                series.ENGINE_RUNNING,
                "Requests the engine runs (vllm:num_requests_running, summed).",
                ["node"],
            )
            running.add_metric(n, reading.running)
            yield running
        if since is not None:
            stalled = _gauge(
                series.ENGINE_SINCE_TOKEN,
                "Seconds since the engine last generated a token while requests run "
                "(0: no request running).",
                ["node"],
            )
            stalled.add_metric(n, since)
            yield stalled


def registry_for(sources: Sources) -> tuple[CollectorRegistry, NodeCollector]:
    """A registry holding only this node's collector (no process or platform series)."""
    registry = CollectorRegistry(auto_describe=False)
    collector = NodeCollector(sources)
    registry.register(collector)
    return registry, collector

"""`deskside top`: fetching snapshots of a running cluster.

`Target` says where everything is (from the run record and, when it can be read, the
recipe); `Watcher.snapshot()` asks Prometheus when it answers, else the /metrics
endpoints directly (rates from two scrapes `interval` seconds apart: the first snapshot
scrapes twice, later ones use the previous scrape)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx
from pydantic import BaseModel

from deskside.errors import DesksideError
from deskside.exporter import series
from deskside.monitor import prom_api
from deskside.monitor.prom_api import Alert, Prometheus
from deskside.monitor.readings import (
    Endpoint,
    EndpointReadings,
    PromReadings,
    Readings,
    Scrape,
    scrape,
)
from deskside.monitor.snapshot import NodeSpec, Snapshot, build_snapshot
from deskside.recipe.types import Recipe
from deskside.records.run import RunRecord


def http_host(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def prometheus_url(recipe: Recipe) -> str:
    """Where the recipe's Prometheus listens: the head's address, monitoring.prometheus_port."""
    return f"http://{http_host(recipe.head.address)}:{recipe.monitoring.prometheus_port}"


class Target(BaseModel):
    recipe: str | None
    nodes: list[NodeSpec]
    api_url: str | None  # the engine's API on the head
    prometheus_url: str | None
    node_exporter_port: int = 9100
    exporter_port: int = series.EXPORTER_PORT

    def endpoints(self) -> list[Endpoint]:
        found = []
        head = next((n for n in self.nodes if n.role == "head"), None)
        if self.api_url and head is not None:
            found.append(Endpoint("engine", head.name, f"{self.api_url.rstrip('/')}/metrics"))
        for n in self.nodes:
            host = http_host(n.address)
            found.append(
                Endpoint("exporter", n.name, f"http://{host}:{self.exporter_port}/metrics")
            )
            found.append(
                Endpoint(
                    "node_exporter", n.name, f"http://{host}:{self.node_exporter_port}/metrics"
                )
            )
        return found


def target_of(run: RunRecord, recipe: Recipe | None, prometheus: str | None = None) -> Target:
    """Where `run`'s metrics are. Prometheus: `prometheus` if given, else the recipe's when
    its monitoring is enabled, else none (endpoints only)."""
    interfaces: dict[str, str | None] = {}
    if recipe is not None:
        for n in recipe.cluster.nodes:
            interfaces[n.name] = n.fabric.interface if n.fabric else None
    if prometheus is None and recipe is not None and recipe.monitoring.enabled:
        prometheus = prometheus_url(recipe)
    return Target(
        recipe=run.recipe_name,
        nodes=[
            NodeSpec(
                name=n.name,
                role=n.role,
                address=n.address,
                fabric_interface=interfaces.get(n.name),
            )
            for n in run.nodes
        ],
        api_url=run.api_url,
        prometheus_url=prometheus,
        node_exporter_port=recipe.monitoring.node_exporter_port if recipe else 9100,
    )


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Watcher:
    """Snapshots of one target, one after another."""

    def __init__(
        self, target: Target, *, interval: float = 2.0, client: httpx.Client | None = None
    ) -> None:
        self.target = target
        self.interval = interval
        self.client = client or prom_api.make_client()
        self.previous: Scrape | None = None

    def close(self) -> None:
        self.client.close()

    def prometheus(self) -> Prometheus | None:
        """The target's Prometheus when it answers now."""
        if self.target.prometheus_url is None:
            return None
        prom = Prometheus(self.target.prometheus_url, self.client)
        return prom if prom.ready() else None

    def snapshot(self) -> Snapshot:
        notes: list[str] = []
        prom = self.prometheus()
        if prom is not None:
            try:
                return self._build(PromReadings(prom), self._alerts(prom, notes), notes)
            except DesksideError as exc:  # it went away between two queries
                notes.append(f"Prometheus stopped answering: {exc.message}")
        elif self.target.prometheus_url is not None:
            notes.append(
                f"Prometheus at {self.target.prometheus_url} does not answer: "
                "reading the /metrics endpoints directly (no alerts)"
            )
        endpoints = self.target.endpoints()
        if self.previous is None:
            self.previous, _ = scrape(self.client, endpoints)
            time.sleep(self.interval)
        latest, missed = scrape(self.client, endpoints)
        readings = EndpointReadings(latest, self.previous)
        self.previous = latest
        return self._build(readings, None, notes + missed)

    @staticmethod
    def _alerts(prom: Prometheus, notes: list[str]) -> list[Alert] | None:
        try:
            return prom.alerts()
        except DesksideError as exc:
            notes.append(f"alerts unknown: {exc.message}")
            return None

    def _build(self, readings: Readings, alerts: list[Alert] | None, notes: list[str]) -> Snapshot:
        return build_snapshot(
            readings,
            self.target.nodes,
            recipe=self.target.recipe,
            taken_at=now_iso(),
            alerts=alerts,
            notes=notes,
        )

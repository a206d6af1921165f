"""The status of a run, wherever its nodes are: each node read through its Transport
(`deskside.runtime.nodes`), the API's health and metrics over HTTP. The same code serves
every runtime.

The cluster verdict: DOWN when no node runs, DEGRADED when some do (or the API stopped
answering after it was ready), STARTING before the first readiness, READY otherwise; a READY
cluster is then judged on the run's series of looks (`deskside.operate.verdict`): WEDGED
when requests run and no token comes while every process lives, DEGRADED when idle with a
rank stopped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

import httpx

from deskside.engine.http import engine_metrics, health
from deskside.httpclient import METRICS
from deskside.httpclient import client as bounded_client
from deskside.operate.verdict import node_controls, with_recovery, with_verdict
from deskside.records.recipes import load_run_recipe
from deskside.records.run import RunRecord
from deskside.runtime.nodes import (
    NodeStatus,
    control_of,
    login_control,
    node_statuses,
    service_reasons,
    transports_of,
)
from deskside.runtime.report import Report
from deskside.transport.base import Transport


class Status(Report, Protocol):
    """A status: a report whose verdict is `cluster` (READY, STARTING, DEGRADED, WEDGED,
    DOWN); it is ok when READY."""

    @property
    def cluster(self) -> str: ...


class Verdict:
    """What a run's and a replica set's status share: READY is ok (exit 0), anything else
    exit 1; the JSON object is the status's fields."""

    cluster: str

    @property
    def ok(self) -> bool:
        return self.cluster == "READY"

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_dict(self) -> dict[str, object]:
        return json.loads(json.dumps(self, default=lambda o: o.__dict__))  # type: ignore[no-any-return]


@dataclass(frozen=True)
class ClusterStatus(Verdict):
    recipe: str
    cluster: str  # READY | STARTING | DEGRADED | WEDGED | DOWN
    api_url: str
    engine: str  # healthy | unreachable
    nodes: list[NodeStatus]
    kv_cache_usage: float | None
    requests_running: float | None
    requests_waiting: float | None
    reasons: list[str]
    release: str | None = None
    suspects: list[str] = field(default_factory=list)  # nodes a wedge's reasons point at
    stalled_seconds: float | None = None  # no token this long while requests ran
    recovery: dict[str, object] | None = None  # what `deskside watch` last saw and did
    startup: dict[str, object] | None = None  # the last start-up, phase by phase


def cluster_status(
    run: RunRecord, nodes: list[NodeStatus], reasons: list[str], client: httpx.Client
) -> ClusterStatus:
    """The verdict (see the module docstring) from the nodes and the head's API."""
    url = run.api_url
    healthy = health(client, url)
    metrics = engine_metrics(client, url) if healthy else None
    running = [n for n in nodes if n.state == "running"]
    if not running:
        cluster = "DOWN"
    elif len(running) < len(nodes):
        cluster = "DEGRADED"
    elif healthy:
        cluster = "READY" if run.ready_at else "STARTING"
    else:
        cluster = "DEGRADED" if run.ready_at else "STARTING"
        if run.ready_at:
            reasons.append(f"engine API {url} does not answer /health")
    return ClusterStatus(
        recipe=run.recipe_name,
        cluster=cluster,
        api_url=url,
        engine="healthy" if healthy else "unreachable",
        nodes=nodes,
        kv_cache_usage=metrics.kv_cache_usage if metrics else None,
        requests_running=metrics.requests_running if metrics else None,
        requests_waiting=metrics.requests_waiting if metrics else None,
        reasons=reasons,
        release=run.release,
        startup=run.startup.model_dump(mode="json") if run.startup else None,
    )


def status(
    run: RunRecord,
    transports: Mapping[str, Transport] | None = None,
    http_transport: httpx.BaseTransport | None = None,
    recovery: bool = True,
) -> ClusterStatus:
    """The run's status; `recovery`: with what `deskside watch` last did (its record)."""
    ts = transports_of(run, given=transports)
    nodes = node_statuses(run, ts)
    reasons = [n.reason for n in nodes if n.reason] + service_reasons(nodes)
    with bounded_client(METRICS, http_transport) as client:
        base = cluster_status(run, nodes, reasons, client)
        if base.cluster == "READY":
            controls = {n.name: login_control(ts[n.name], control_of(run, n)) for n in run.nodes}
            recipe = load_run_recipe(run)
            survive = recipe.survive if recipe is not None else None
            looked = node_controls(run, ts, controls)
            base = replace(
                base, **with_verdict(base.cluster, base.reasons, run, client, looked, survive)
            )
        if not recovery:
            return base
        head = next(n for n in run.nodes if n.role == "head")
        return replace(base, **with_recovery(base.cluster, base.reasons, run, ts[head.name]))


def run_status(run: RunRecord, known_hosts: str | None = None) -> ClusterStatus:
    """The run's status, each node reached the way its record says (SSH with `known_hosts`,
    by default the run's)."""
    return status(run, transports_of(run, known_hosts))


__all__ = ["ClusterStatus", "Status", "cluster_status", "run_status", "status"]

"""The replica set's status: every group's own status (a run like any other) and the
proxy's, folded into one verdict.

READY: every group READY and the proxy answers. DEGRADED: at least one group READY but
not all (the proxy routes around the others), or the proxy does not answer while groups
serve. With no group READY the set is the worst of its groups: WEDGED, STARTING, DEGRADED,
DOWN.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

from deskside.httpclient import METRICS, Limits
from deskside.httpclient import client as bounded_client
from deskside.operate.status import ClusterStatus, Verdict, run_status
from deskside.records.replica_set import SetRecord
from deskside.records.run import load_run
from deskside.replicas.place import recorded_transport
from deskside.replicas.stop import proxy_alive

ORDER = ("WEDGED", "STARTING", "DEGRADED", "DOWN")


@dataclass
class SetStatus(Verdict):
    recipe: str
    cluster: str  # READY | STARTING | DEGRADED | WEDGED | DOWN
    proxy_url: str | None
    proxy: str  # healthy | unreachable | stopped
    groups: dict[str, ClusterStatus | None] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)


def set_verdict(groups: Mapping[str, str | None], proxy: str) -> tuple[str, list[str]]:
    """The set's state and reasons from each group's state (None: no run) and the proxy's."""
    states = {g: s or "DOWN" for g, s in groups.items()}
    ready = [g for g, s in states.items() if s == "READY"]
    reasons = [
        f"group {g} is {s}" + (": the proxy routes around it" if ready else "")
        for g, s in states.items()
        if s != "READY"
    ]
    if proxy != "healthy":
        reasons.insert(0, f"the proxy is {proxy}: clients reach no group through it")
    if ready and len(ready) == len(states) and proxy == "healthy":
        return "READY", []
    if ready:
        if proxy == "healthy":
            reasons.append(f"{len(ready)} of {len(states)} groups serve ({', '.join(ready)})")
        return "DEGRADED", reasons
    worst = next((s for s in ORDER if s in states.values()), "DOWN")
    return worst, reasons


def proxy_health(record: SetRecord, alive: bool, client: httpx.Client) -> str:
    """healthy (answers its liveness check), unreachable (runs, does not answer), or
    stopped."""
    if record.proxy is None or not alive:
        return "stopped"
    try:
        ok = client.get(f"{record.proxy_url}/health/liveliness").status_code == 200
    except httpx.HTTPError:
        ok = False
    return "healthy" if ok else "unreachable"


def set_status(record: SetRecord, known_hosts: str | None = None) -> SetStatus:
    """Read every group's status and the proxy's (see the module docstring)."""
    groups: dict[str, ClusterStatus | None] = {}
    for g in record.groups:
        run = load_run(record.group_run(g))
        hosts = known_hosts or record.known_hosts
        groups[g] = run_status(run, hosts) if run is not None else None
    alive = record.proxy is not None and proxy_alive(record.proxy, recorded_transport(record))
    with bounded_client(Limits(total=5, max_bytes=METRICS.max_bytes)) as client:
        proxy = proxy_health(record, alive, client)
    state, reasons = set_verdict({g: s.cluster if s else None for g, s in groups.items()}, proxy)
    return SetStatus(record.recipe_name, state, record.proxy_url, proxy, groups, reasons)


__all__ = ["SetStatus", "proxy_health", "set_status", "set_verdict"]

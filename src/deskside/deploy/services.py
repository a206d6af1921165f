"""The deploy's services beside the engines: the LiteLLM proxy (head) and, with
monitoring, Prometheus and Grafana (head), node_exporter and deskside's exporter (every
node) — started the way the recipe's engines are controlled:

- `systemd` (runtime.systemd): the release's service units installed, enabled (back after
  a reboot) and restarted; their names kept in the node's state for `down`;
- `compose` (container runtime): `docker compose up` on the head's `cluster/compose.yaml`
  and each node's `monitoring.compose.yaml`; deskside's exporter as a process (it reads the
  node's sysfs, /proc and NVML natively);
- `process`: each service as a process in its own session, recorded like the engine (pid,
  start time, run tag). Grafana runs only under Docker Compose.

Then every service must answer at its URL (`wait_services`).
"""

from __future__ import annotations

from typing import get_args

from deskside.deploy.deployment import Deployment
from deskside.records.node import ComposeProject, NodeState, ServiceName
from deskside.render import services as rendered
from deskside.render import units
from deskside.render.context import NodeContext, RenderContext, build_context
from deskside.runtime.control import run_tag
from deskside.runtime.node_sh import RUN_TAG
from deskside.runtime.ops import Amend, Op, Run, Spawn
from deskside.runtime.services import ServiceLaunch, ready_url

RECORDED: dict[str, ServiceName] = {
    rendered.PROXY: "proxy",
    rendered.PROMETHEUS: "prometheus",
    rendered.NODE_EXPORTER: "node_exporter",
    units.EXPORTER: "exporter",
}
# every recorded service but the watcher, which runs where deskside runs, not on a node
assert set(RECORDED.values()) == set(get_args(ServiceName)) - {"watch"}


def _ready_url(ctx: RenderContext, n: NodeContext, service: str) -> str:
    return ready_url(ctx.recipe, n.node, RECORDED.get(service, service))


def _launch(ctx: RenderContext, n: NodeContext, service: str) -> ServiceLaunch:
    native = service != rendered.GRAFANA
    return ServiceLaunch(
        RECORDED.get(service, service),
        n.name,
        tuple(units.program_argv(ctx, n, service)) if native else (),
        _ready_url(ctx, n, service),
        units.WHAT[service],
    )


def service_ops(
    d: Deployment, rid: str, states: dict[str, NodeState]
) -> tuple[list[Op], list[ServiceLaunch], list[str]]:
    """(operations, the services to wait for, notes). `states`: each node's engine state
    as the start plans it (its start time names the services' run tags); what the services
    are is added to each node's recorded state."""
    ctx = build_context(d.recipe, d.recipe_path, d.plan)
    ops: list[Op] = []
    waits: list[ServiceLaunch] = []
    notes: list[str] = []
    started = d.now()
    release = d.layout.release(rid)
    for n in sorted(ctx.nodes, key=lambda n: n.node.role != "head"):
        names = units.node_services(ctx, n)
        if not names:
            continue
        control = d.controls[n.name]
        state = states[n.name]
        spawned: list[str] = []
        if control.kind == "systemd":
            found = [u.name for u in units.service_units(ctx, n)]
            ops += [
                Run(n.name, tuple(a), f"installing the services of {n.name}", 600)
                for a in control.unit_install(rid, tuple(found))
            ]
            restart = (*control.sudo, "systemctl", "restart", *found)
            ops.append(Run(n.name, restart, f"starting the services of {n.name}", 900))
            ops.append(Amend(n.name, d.layout, (("units", found),), "recording the services"))
        elif control.kind == "compose":
            projects = []
            if n.node.role == "head" and rendered.cluster_services(ctx):
                projects.append(
                    ComposeProject(
                        project=rendered.cluster_project(ctx),
                        file=f"{release}/cluster/{rendered.CLUSTER_COMPOSE}",
                    )
                )
            if d.recipe.monitoring.enabled:
                projects.append(
                    ComposeProject(
                        project=rendered.node_project(ctx),
                        file=f"{release}/{rendered.NODE_COMPOSE}",
                    )
                )
            for c in projects:
                up = (*control.sudo, *control.compose_file(c.project, c.file, "up"))
                up += ("--detach", "--remove-orphans")
                ops.append(Run(n.name, up, f"starting {c.project} on {n.name}", 900))
            ops.append(Amend(n.name, d.layout, (("compose", projects),), "recording the services"))
            # natively: the exporter, and the proxy when it has no image
            in_compose = rendered.cluster_services(ctx) if n.node.role == "head" else []
            spawned = [s for s in names if s in (units.EXPORTER, rendered.PROXY)]
            spawned = [s for s in spawned if s not in in_compose]
        else:
            spawned = [s for s in names if s != rendered.GRAFANA]
            if rendered.GRAFANA in names:
                notes.append(
                    f"{n.name}: Grafana runs under Docker Compose only (runtime.kind container "
                    "or runtime.systemd); the dashboard is in the release's cluster/grafana"
                )
        for service in spawned:
            sl = _launch(ctx, n, service)
            ops.append(
                Spawn(
                    n.name,
                    sl.argv,
                    ((RUN_TAG, run_tag(state, sl.name)),),
                    d.layout.service_log(rid, f"{started:%Y%m%dT%H%M%SZ}", sl.name),
                    release,
                    f"{sl.what} on {n.name}",
                    d.layout,
                    RECORDED[service],
                    None,
                )
            )
        waits += [
            _launch(ctx, n, s)
            for s in names
            if not (s == rendered.GRAFANA and control.kind == "process")
        ]
    return ops, waits, notes

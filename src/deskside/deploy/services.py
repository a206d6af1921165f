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

from typing import cast

from deskside.deploy.deployment import Deployment
from deskside.engine.services import Service
from deskside.records.node import ComposeProject, NodeState, ServiceName
from deskside.render import services as rendered
from deskside.render import units
from deskside.render.context import build_context
from deskside.runtime.control import run_tag
from deskside.runtime.node_sh import RUN_TAG
from deskside.runtime.ops import Amend, Op, Run, Spawn


def service_ops(
    d: Deployment, rid: str, states: dict[str, NodeState]
) -> tuple[list[Op], list[Service], list[str]]:
    """(operations, the services to wait for, notes). `states`: each node's engine state
    as the start plans it (its start time names the services' run tags); what the services
    are is added to each node's recorded state."""
    ctx = build_context(d.recipe, d.recipe_path, d.plan)
    ops: list[Op] = []
    waits: list[Service] = []
    notes: list[str] = []
    started = d.now()
    release = d.layout.release(rid)
    for n in sorted(ctx.nodes, key=lambda n: n.node.role != "head"):
        table = ctx.services_of(n.name)
        if not table:
            continue
        control = d.controls[n.name]
        state = states[n.name]
        spawned: list[Service] = []
        if control.kind == "systemd":
            found = [u.name for u in units.service_units(ctx, n)]
            ops += [
                Run(n.name, tuple(a), f"installing the services of {n.name}", 600)
                for a in control.unit_install(rid, tuple(found))
            ]
            restart = (*control.sudo, "systemctl", "restart", *found)
            ops.append(Run(n.name, restart, f"starting the services of {n.name}", 900))
            ops.append(Amend(n.name, d.layout, (("units", found),), "recording the services"))
            waits += table
        elif control.kind == "compose":
            projects = []
            if n.node.role == "head" and rendered.compose_services(ctx):
                projects.append(
                    ComposeProject(
                        project=rendered.cluster_project(ctx),
                        file=f"{release}/cluster/{rendered.CLUSTER_COMPOSE}",
                    )
                )
            if rendered.compose_services(ctx, n.name):
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
            spawned = [s for s in table if not s.in_container]
            waits += table
        else:
            spawned = [s for s in table if s.argv]
            waits += spawned
            if any(not s.argv for s in table):
                notes.append(
                    f"{n.name}: Grafana runs under Docker Compose only (runtime.kind container "
                    "or runtime.systemd); the dashboard is in the release's cluster/grafana"
                )
        for s in spawned:
            name = cast(ServiceName, s.name)  # a service with a command line: a ServiceName
            ops.append(
                Spawn(
                    n.name,
                    s.argv,
                    ((RUN_TAG, run_tag(state, name)),),
                    d.layout.service_log(rid, f"{started:%Y%m%dT%H%M%SZ}", s.name),
                    release,
                    f"{s.what} on {n.name}",
                    d.layout,
                    name,
                    None,
                )
            )
    return ops, waits, notes

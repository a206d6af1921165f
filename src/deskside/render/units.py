"""systemd units of the services beside the engine (runtime.systemd), in the folder of the
node that runs them: `<node>/deskside-<recipe>-<service>.service`.

    proxy           head    proxy.enabled
    prometheus      head    monitoring.enabled
    grafana         head    monitoring.enabled
    node-exporter   every   monitoring.enabled
    exporter        every   monitoring.enabled

Container runtime: proxy, prometheus, grafana and node-exporter are Compose services
(`deskside.render.services`); their units bring one service of the project up and remove
it (`Type=oneshot`), as the engine's unit does. Native runtime: the units run the programs
(the recipe names them: `monitoring.prometheus`, `monitoring.node_exporter`; the proxy is
run-proxy.sh), restarted on failure, in the node's network namespace when it has one.
Grafana is a Compose service under either runtime (it needs its own home, plugins and
configuration folders; the image has them).

deskside's exporter always runs natively (`monitoring.deskside exporter ...`): it reads the
node's sysfs, NVML and the engine's /metrics, which a container would have to be given one
by one. It reads the recipe from `EXPORTER_RECIPE` in the node's current release.

What each service runs, and whether it runs in its image, is the service table's
(`deskside.engine.services`); this module adds what systemd needs (hardening, the node's
network namespace).
"""

from __future__ import annotations

from dataclasses import dataclass

from deskside.engine.services import EXPORTER_RECIPE, Service
from deskside.render.context import NodeContext, RenderContext
from deskside.render.quote import systemd_command
from deskside.render.services import (
    CLUSTER_COMPOSE,
    NODE_COMPOSE,
    cluster_project,
    node_project,
)
from deskside.render.templates import render_template

__all__ = ["EXPORTER_RECIPE", "Unit", "service_units", "unit_name"]

_HARDENING = ("NoNewPrivileges=yes", "PrivateTmp=yes", "ProtectControlGroups=yes")
HARDENING = {
    "proxy": (*_HARDENING, "ProtectSystem=full"),
    "prometheus": (*_HARDENING, "ProtectSystem=full", "ProtectKernelTunables=yes"),
    # reads /proc and /sys, writes nothing
    "node_exporter": (
        *_HARDENING,
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "ProtectKernelTunables=yes",
    ),
    # reads sysfs and NVML (/dev/nvidia*: no PrivateDevices)
    "exporter": (*_HARDENING, "ProtectSystem=full", "ProtectHome=read-only"),
}


@dataclass(frozen=True)
class Unit:
    node: str
    service: str
    name: str
    text: str


def unit_name(ctx: RenderContext, service: str) -> str:
    return f"{ctx.layout.compose_project}-{service}.service"


def _header(ctx: RenderContext, n: NodeContext, s: Service) -> dict[str, str]:
    return {
        "recipe_name": ctx.recipe.name,
        "recipe_file": ctx.recipe_file,
        "node_name": n.name,
        "what": s.what,
    }


def _compose_unit(ctx: RenderContext, n: NodeContext, s: Service) -> str:
    if s.per_node:
        project, file = node_project(ctx), f"{ctx.layout.current}/{NODE_COMPOSE}"
    else:
        project, file = cluster_project(ctx), f"{ctx.layout.current}/cluster/{CLUSTER_COMPOSE}"
    return render_template(
        "compose-part.service.j2",
        **_header(ctx, n, s),
        service=s.slug,
        project=project,
        up=systemd_command(ctx.compose(project, file, "up", "--detach", "--no-deps", s.slug)),
        down=systemd_command(ctx.compose(project, file, "rm", "--stop", "--force", s.slug)),
    )


def _program_unit(ctx: RenderContext, n: NodeContext, s: Service) -> str:
    return render_template(
        "program.service.j2",
        **_header(ctx, n, s),
        start=systemd_command(list(s.argv)),
        netns=f"/run/netns/{n.node.netns}" if n.node.netns else None,
        hardening=HARDENING[s.name],
    )


def service_units(ctx: RenderContext, n: NodeContext) -> list[Unit]:
    """The units of node `n`'s services (none without runtime.systemd): a service that
    runs in its image brings its Compose service up; the others run their command."""
    if not ctx.recipe.runtime.systemd:
        return []
    units = []
    for s in ctx.services_of(n.name):
        make = _compose_unit if s.in_container else _program_unit
        units.append(Unit(n.name, s.slug, unit_name(ctx, s.slug), make(ctx, n, s)))
    return units

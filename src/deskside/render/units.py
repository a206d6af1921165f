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
"""

from __future__ import annotations

from dataclasses import dataclass

from deskside.exporter import series
from deskside.render.context import NodeContext, RenderContext
from deskside.render.quote import systemd_command
from deskside.render.services import (
    CLUSTER_COMPOSE,
    GRAFANA,
    NODE_COMPOSE,
    NODE_EXPORTER,
    PROMETHEUS,
    PROXY,
    cluster_project,
    data_dir,
    node_project,
)
from deskside.render.templates import render_template

EXPORTER = "exporter"
EXPORTER_RECIPE = "recipe.yaml"
"""The recipe the exporter reads on every node, in the node's bundle folder (R/N/current)."""

_HARDENING = ("NoNewPrivileges=yes", "PrivateTmp=yes", "ProtectControlGroups=yes")
HARDENING = {
    PROXY: (*_HARDENING, "ProtectSystem=full"),
    PROMETHEUS: (*_HARDENING, "ProtectSystem=full", "ProtectKernelTunables=yes"),
    # reads /proc and /sys, writes nothing
    NODE_EXPORTER: (
        *_HARDENING,
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "ProtectKernelTunables=yes",
    ),
    # reads sysfs and NVML (/dev/nvidia*: no PrivateDevices)
    EXPORTER: (*_HARDENING, "ProtectSystem=full", "ProtectHome=read-only"),
}

WHAT = {
    PROXY: "LiteLLM proxy",
    PROMETHEUS: "Prometheus",
    GRAFANA: "Grafana",
    NODE_EXPORTER: "node_exporter",
    EXPORTER: "deskside exporter",
}


@dataclass(frozen=True)
class Unit:
    node: str
    service: str
    name: str
    text: str


def unit_name(ctx: RenderContext, service: str) -> str:
    return f"{ctx.layout.compose_project}-{service}.service"


def _header(ctx: RenderContext, n: NodeContext, service: str) -> dict[str, str]:
    return {
        "recipe_name": ctx.recipe.name,
        "recipe_file": ctx.recipe_file,
        "node_name": n.name,
        "what": WHAT[service],
    }


def _compose_unit(ctx: RenderContext, n: NodeContext, service: str) -> str:
    if service in (PROXY, PROMETHEUS, GRAFANA):
        project, file = cluster_project(ctx), f"{ctx.layout.current}/cluster/{CLUSTER_COMPOSE}"
    else:
        project, file = node_project(ctx), f"{ctx.layout.current}/{NODE_COMPOSE}"
    return render_template(
        "compose-part.service.j2",
        **_header(ctx, n, service),
        service=service,
        project=project,
        up=systemd_command(ctx.compose(project, file, "up", "--detach", "--no-deps", service)),
        down=systemd_command(ctx.compose(project, file, "rm", "--stop", "--force", service)),
    )


def program_argv(ctx: RenderContext, n: NodeContext, service: str) -> list[str]:
    """How `service` runs natively on node `n` (also what its unit starts)."""
    recipe = ctx.recipe
    mon = recipe.monitoring
    current = ctx.layout.current
    if service == PROXY:
        return ["/bin/sh", f"{current}/cluster/litellm/run-proxy.sh"]
    if service == PROMETHEUS:
        return [
            mon.prometheus,
            f"--config.file={current}/cluster/prometheus/prometheus.yml",
            f"--storage.tsdb.path={data_dir(ctx, PROMETHEUS)}",
            f"--web.listen-address={recipe.head.address}:{mon.prometheus_port}",
        ]
    if service == NODE_EXPORTER:
        return [
            mon.node_exporter,
            f"--web.listen-address={n.node.address}:{mon.node_exporter_port}",
        ]
    assert service == EXPORTER
    return [
        mon.deskside,
        "exporter",
        "--recipe",
        f"{ctx.layout.current}/{EXPORTER_RECIPE}",
        "--node",
        n.name,
        "--host",
        n.node.address,
        "--port",
        str(series.EXPORTER_PORT),
    ]


def _program_unit(ctx: RenderContext, n: NodeContext, service: str) -> str:
    return render_template(
        "program.service.j2",
        **_header(ctx, n, service),
        start=systemd_command(program_argv(ctx, n, service)),
        netns=f"/run/netns/{n.node.netns}" if n.node.netns else None,
        hardening=HARDENING[service],
    )


def node_services(ctx: RenderContext, n: NodeContext) -> list[str]:
    """The services (besides the engine) node `n` runs, in a fixed order."""
    recipe = ctx.recipe
    head = n.node.role == "head"
    out = [PROXY] if head and recipe.runs_proxy else []
    if recipe.monitoring.enabled:
        out += [PROMETHEUS, GRAFANA] if head else []
        out += [NODE_EXPORTER, EXPORTER]
    return out


def service_units(ctx: RenderContext, n: NodeContext) -> list[Unit]:
    """The units of node `n`'s services (none without runtime.systemd)."""
    if not ctx.recipe.runtime.systemd:
        return []
    container = ctx.recipe.runtime.kind == "container"
    units = []
    for service in node_services(ctx, n):
        compose = service == GRAFANA or (
            container
            and service != EXPORTER
            and not (service == PROXY and ctx.recipe.proxy.image is None)
        )
        make = _compose_unit if compose else _program_unit
        units.append(Unit(n.name, service, unit_name(ctx, service), make(ctx, n, service)))
    return units

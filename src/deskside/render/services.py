"""The services beside the engine under Docker Compose, and Grafana's provisioning.

- `cluster/compose.yaml` on the head (project `deskside-<recipe>-cluster`): the LiteLLM
  proxy (proxy.enabled), Prometheus and Grafana (monitoring.enabled);
- `<node>/monitoring.compose.yaml` on every node (project `deskside-<recipe>-monitoring`):
  node_exporter. A file of its own, beside the engine's compose.yaml, so a node runs it
  under either runtime and restarting it never touches the engine;
- `cluster/grafana/provisioning/{datasources,dashboards}/deskside.yaml`: the head's
  Prometheus as Grafana's default datasource, and a file provider for the dashboards.

deskside's own exporter is not a container: it is `deskside exporter`, a Python program
that reads the node's sysfs, NVML and the engine's /metrics; it runs natively on every node
(`deskside.render.units`), from the deskside the node has.

Each service's image, command (or entrypoint), bind mounts, environment and readiness URL
are the service table's (`deskside.engine.services`); this file adds host network,
`restart: unless-stopped`, labels, and a healthcheck on the readiness URL. Images are
pinned by digest (recipe fields). Prometheus and Grafana keep their data under R/N/data/
(outside the releases, so it survives them); Docker creates those folders owned by root,
so both run as root. Every string goes through `quote.compose_string`.
"""

from __future__ import annotations

from typing import Any

from deskside.engine.services import IN_CONTAINER, Service, url
from deskside.render.compose import bind, python_check
from deskside.render.context import RenderContext
from deskside.render.quote import compose_string
from deskside.render.serialize import comment_header, yaml_text

CLUSTER_COMPOSE = "compose.yaml"  # in cluster/
NODE_COMPOSE = "monitoring.compose.yaml"  # in <node>/

DASHBOARDS_IN_CONTAINER = f"{IN_CONTAINER}/grafana/dashboards"
DATASOURCE_UID = "deskside-prometheus"

# what a service's container needs besides its service: Prometheus and Grafana write their
# data under R/N/data/, which Docker creates owned by root; node_exporter sees the host's
# processes
_EXTRAS: dict[str, dict[str, Any]] = {
    "prometheus": {"user": "root"},
    "grafana": {"user": "root"},
    "node_exporter": {"pid": "host"},
}


def cluster_project(ctx: RenderContext) -> str:
    return f"{ctx.layout.compose_project}-cluster"


def node_project(ctx: RenderContext) -> str:
    return f"{ctx.layout.compose_project}-monitoring"


def compose_services(ctx: RenderContext, node: str | None = None) -> list[Service]:
    """The services of the head's cluster/compose.yaml (`node` None: the proxy when it
    has an image, Prometheus and Grafana), or of `node`'s monitoring.compose.yaml."""
    if node is None:
        return [s for s in ctx.services if s.container is not None and not s.per_node]
    return [s for s in ctx.services_of(node) if s.container is not None and s.per_node]


def cluster_services(ctx: RenderContext) -> list[str]:
    """The service names of the head's cluster/compose.yaml."""
    return [s.slug for s in compose_services(ctx)]


def _wget_check(url: str, start_period: str = "1m") -> dict[str, Any]:
    """A healthcheck with busybox wget (in the Prometheus, node_exporter, Grafana images)."""
    return {
        "test": ["CMD", "wget", "-q", "-O", "/dev/null", compose_string(url)],
        "interval": "30s",
        "timeout": "10s",
        "retries": 3,
        "start_period": start_period,
    }


def _source(ctx: RenderContext, source: str) -> str:
    """A mount's source as the Compose file names it: the cluster files relative to the
    file (cluster/compose.yaml), so a release reads its own."""
    cluster = ctx.service_site.cluster
    if source.startswith(cluster + "/"):
        return "./" + source.removeprefix(cluster + "/")
    return source


def compose_service(ctx: RenderContext, s: Service) -> dict[str, Any]:
    """The Compose service of `s` (which has an image): host network, restart unless
    stopped, its command and mounts as the service table gives them, a healthcheck on its
    readiness URL."""
    c = s.container
    assert c is not None  # compose_services: the service has an image
    out: dict[str, Any] = {
        "image": compose_string(c.image),
        "network_mode": "host",
        "restart": "unless-stopped",
        "labels": {
            "io.deskside.recipe": ctx.recipe.name,
            "io.deskside.node": s.node,
            "io.deskside.service": s.slug,
        },
        **_EXTRAS.get(s.name, {}),
    }
    if c.entrypoint is not None:
        out["entrypoint"] = [compose_string(a) for a in c.entrypoint]
    if c.env:
        out["environment"] = {name: compose_string(value) for name, value in c.env}
    if c.command:
        out["command"] = [compose_string(a) for a in c.command]
    out["volumes"] = [
        bind(_source(ctx, m.source), m.target, read_only=m.read_only, propagation=m.propagation)
        for m in c.mounts
    ]
    # LiteLLM's image has python3, not wget
    check = python_check(s.ready_url, "2m") if s.name == "proxy" else _wget_check(s.ready_url)
    out["healthcheck"] = check
    return out


def cluster_compose_data(ctx: RenderContext) -> dict[str, Any]:
    # no top-level `name:` (Compose v1.29 refuses it): every command passes --project-name
    return {"services": {s.slug: compose_service(ctx, s) for s in compose_services(ctx)}}


def node_compose_data(ctx: RenderContext, node: str) -> dict[str, Any]:
    return {"services": {s.slug: compose_service(ctx, s) for s in compose_services(ctx, node)}}


def render_cluster_compose(ctx: RenderContext) -> str:
    names = ", ".join(cluster_services(ctx))
    lines = [
        f"{ctx.recipe.name}: the services of the head ({ctx.recipe.head.name}) under Docker "
        f"Compose: {names}.",
    ]
    if ctx.recipe.runtime.kind == "native" and ctx.recipe.runtime.systemd:
        lines.append(
            "The native runtime's units run the proxy and Prometheus natively and take only "
            "grafana from this file: start the others from here only instead of their units."
        )
    header = comment_header(
        *lines,
        f"Rendered by `deskside render` from {ctx.recipe_file}.",
        "Change the recipe and render again rather than editing this file.",
    )
    return yaml_text(cluster_compose_data(ctx), header)


def render_node_compose(ctx: RenderContext, node: str) -> str:
    header = comment_header(
        f"{ctx.recipe.name}: node_exporter on node {node} under Docker Compose (host network, "
        "the host's filesystems read-only under /host).",
        f"Rendered by `deskside render` from {ctx.recipe_file}.",
        "Change the recipe and render again rather than editing this file.",
    )
    return yaml_text(node_compose_data(ctx, node), header)


# --------------------------------------------------------------------------- Grafana


def grafana_datasource(ctx: RenderContext) -> dict[str, Any]:
    recipe = ctx.recipe
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "Prometheus",
                "uid": DATASOURCE_UID,
                "type": "prometheus",
                "access": "proxy",
                "url": url(recipe.head.address, recipe.monitoring.prometheus_port),
                "isDefault": True,
                "editable": False,
                "jsonData": {"timeInterval": recipe.monitoring.scrape_interval},
            }
        ],
    }


def grafana_dashboard_provider(ctx: RenderContext) -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": f"deskside-{ctx.recipe.name}",
                "folder": "deskside",
                "type": "file",
                "disableDeletion": True,
                "allowUiUpdates": False,
                "updateIntervalSeconds": 60,
                "options": {"path": DASHBOARDS_IN_CONTAINER, "foldersFromFilesStructure": False},
            }
        ],
    }


def render_grafana_datasource(ctx: RenderContext) -> str:
    header = comment_header(
        f"{ctx.recipe.name}: Grafana's datasource, the Prometheus on the head "
        f"({ctx.recipe.head.name}).",
        f"Rendered by `deskside render` from {ctx.recipe_file}.",
    )
    return yaml_text(grafana_datasource(ctx), header)


def render_grafana_dashboard_provider(ctx: RenderContext) -> str:
    header = comment_header(
        f"{ctx.recipe.name}: Grafana loads the dashboards of the bundle's grafana/dashboards "
        "folder (mounted read-only; change them by rendering again).",
        f"Rendered by `deskside render` from {ctx.recipe_file}.",
    )
    return yaml_text(grafana_dashboard_provider(ctx), header)

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

Every service: images pinned by digest (recipe fields), host network, `restart:
unless-stopped`, a healthcheck. Prometheus and Grafana keep their data under R/N/data/
(outside the releases, so it survives them); Docker creates those folders owned by root,
so both run as root. Every string goes through `quote.compose_string`.
"""

from __future__ import annotations

from typing import Any

from deskside.render.compose import bind, python_check
from deskside.render.context import RenderContext
from deskside.render.proxy import master_key_path
from deskside.render.quote import compose_string
from deskside.render.serialize import comment_header, yaml_text

CLUSTER_COMPOSE = "compose.yaml"  # in cluster/
NODE_COMPOSE = "monitoring.compose.yaml"  # in <node>/
PROXY, PROMETHEUS, GRAFANA, NODE_EXPORTER = "proxy", "prometheus", "grafana", "node-exporter"

IN_CONTAINER = "/deskside"
"""Where the head's cluster files are mounted in the service containers."""
DASHBOARDS_IN_CONTAINER = f"{IN_CONTAINER}/grafana/dashboards"
DATASOURCE_UID = "deskside-prometheus"


def cluster_project(ctx: RenderContext) -> str:
    return f"{ctx.layout.compose_project}-cluster"


def node_project(ctx: RenderContext) -> str:
    return f"{ctx.layout.compose_project}-monitoring"


def data_dir(ctx: RenderContext, service: str) -> str:
    """Where a service keeps its data on the head: R/N/data/<service>."""
    return ctx.layout.service_data(service)


def cluster_services(ctx: RenderContext) -> list[str]:
    """The head's services under Docker Compose: the proxy when it has an image, the
    monitoring's Prometheus and Grafana."""
    recipe = ctx.recipe
    proxy = recipe.runs_proxy and recipe.proxy.image is not None
    return [PROXY] * proxy + [PROMETHEUS, GRAFANA] * recipe.monitoring.enabled


def _url(host: str, port: int, path: str) -> str:
    return f"http://{host}:{port}{path}"


def _wget_check(url: str, start_period: str = "1m") -> dict[str, Any]:
    """A healthcheck with busybox wget (in the Prometheus, node_exporter, Grafana images)."""
    return {
        "test": ["CMD", "wget", "-q", "-O", "/dev/null", compose_string(url)],
        "interval": "30s",
        "timeout": "10s",
        "retries": 3,
        "start_period": start_period,
    }


def _labels(ctx: RenderContext, service: str, node: str) -> dict[str, str]:
    return {
        "io.deskside.recipe": ctx.recipe.name,
        "io.deskside.node": node,
        "io.deskside.service": service,
    }


def _base(ctx: RenderContext, image: str, service: str, node: str) -> dict[str, Any]:
    return {
        "image": compose_string(image),
        "network_mode": "host",
        "restart": "unless-stopped",
        "labels": _labels(ctx, service, node),
    }


def proxy_service(ctx: RenderContext) -> dict[str, Any]:
    recipe = ctx.recipe
    head = recipe.head
    key, engine_env = master_key_path(ctx), ctx.layout.engine_env
    assert recipe.proxy.image is not None  # cluster_services: the proxy has an image
    return {
        **_base(ctx, recipe.proxy.image, PROXY, head.name),
        # run-proxy.sh reads both keys from their files and starts the image's `litellm`
        "entrypoint": ["/bin/sh", f"{IN_CONTAINER}/litellm/run-proxy.sh", "litellm"],
        "volumes": [
            bind("./litellm", f"{IN_CONTAINER}/litellm", read_only=True),
            bind(key, key, read_only=True),
            bind(engine_env, engine_env, read_only=True),
        ],
        "healthcheck": python_check(
            _url(head.address, recipe.proxy.port, "/health/liveliness"), "2m"
        ),
    }


def prometheus_service(ctx: RenderContext) -> dict[str, Any]:
    recipe = ctx.recipe
    mon, head = recipe.monitoring, recipe.head
    return {
        **_base(ctx, mon.images.prometheus, PROMETHEUS, head.name),
        "user": "root",
        "command": [
            f"--config.file={IN_CONTAINER}/prometheus/prometheus.yml",
            "--storage.tsdb.path=/prometheus",
            compose_string(f"--web.listen-address={head.address}:{mon.prometheus_port}"),
        ],
        "volumes": [
            bind("./prometheus", f"{IN_CONTAINER}/prometheus", read_only=True),
            bind(data_dir(ctx, PROMETHEUS), "/prometheus"),
        ],
        "healthcheck": _wget_check(_url(head.address, mon.prometheus_port, "/-/healthy")),
    }


def grafana_service(ctx: RenderContext) -> dict[str, Any]:
    recipe = ctx.recipe
    mon, head = recipe.monitoring, recipe.head
    return {
        **_base(ctx, mon.images.grafana, GRAFANA, head.name),
        "user": "root",
        "environment": {
            "GF_SERVER_HTTP_ADDR": compose_string(head.address),
            "GF_SERVER_HTTP_PORT": str(mon.grafana_port),
            "GF_PATHS_PROVISIONING": f"{IN_CONTAINER}/grafana/provisioning",
            # the nodes may have no way out: no update checks, no usage reports
            "GF_ANALYTICS_REPORTING_ENABLED": "false",
            "GF_ANALYTICS_CHECK_FOR_UPDATES": "false",
            "GF_ANALYTICS_CHECK_FOR_PLUGIN_UPDATES": "false",
        },
        "volumes": [
            bind("./grafana", f"{IN_CONTAINER}/grafana", read_only=True),
            bind(data_dir(ctx, GRAFANA), "/var/lib/grafana"),
        ],
        "healthcheck": _wget_check(_url(head.address, mon.grafana_port, "/api/health")),
    }


def cluster_compose_data(ctx: RenderContext) -> dict[str, Any]:
    makers = {PROXY: proxy_service, PROMETHEUS: prometheus_service, GRAFANA: grafana_service}
    # no top-level `name:` (Compose v1.29 refuses it): every command passes --project-name
    return {"services": {name: makers[name](ctx) for name in cluster_services(ctx)}}


def node_compose_data(ctx: RenderContext, node: str) -> dict[str, Any]:
    recipe = ctx.recipe
    mon = recipe.monitoring
    address = next(n.address for n in recipe.cluster.nodes if n.name == node)
    listen = f"{address}:{mon.node_exporter_port}"
    service = {
        **_base(ctx, mon.images.node_exporter, NODE_EXPORTER, node),
        "pid": "host",
        "command": [
            "--path.rootfs=/host",
            compose_string(f"--web.listen-address={listen}"),
        ],
        # the host's filesystems, read-only, for the filesystem and infiniband collectors
        "volumes": [
            {
                "type": "bind",
                "source": "/",
                "target": "/host",
                "read_only": True,
                "bind": {"propagation": "rslave"},
            }
        ],
        "healthcheck": _wget_check(_url(address, mon.node_exporter_port, "/metrics")),
    }
    return {"services": {NODE_EXPORTER: service}}


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
                "url": _url(recipe.head.address, recipe.monitoring.prometheus_port, ""),
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

"""The one derivation of the processes deskside starts beside the engines: (recipe, site)
-> Service, as `deskside.engine.launch.launches` is for the engines.

    proxy          head        proxy.enabled      the LiteLLM proxy (run-proxy.sh)
    prometheus     head        monitoring.enabled
    grafana        head        monitoring.enabled only in its image (Docker Compose)
    node_exporter  every node  monitoring.enabled
    exporter       every node  monitoring.enabled deskside's exporter, always natively
    watch          head        survive.watch      `deskside watch`, on this machine only

Each service says, once: its program and whole command line natively; in its image (when
it has one) the command, the bind mounts (host path -> container path) and the
environment; the names of its secret variables and the files their values are read from
at start (never a value); the URL that answers 200 once it is up; its ports; and the node
that runs it. In the image, every path of the command is the container's view of the
same host path (`Container.command` is the native arguments seen through the mounts), so
a service reads the same files wherever it runs.

Where it runs is the `ServiceSite`: this machine (`deskside.runtime.local` spawns the
native command lines), or deployed nodes (`deskside.render` writes systemd units and
Compose files from the same services; the deploy spawns or starts them). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from deskside.exporter.series import EXPORTER_PORT
from deskside.layout import ENGINE_ENV_FILE, ENGINE_KEY_ENV, NodeLayout
from deskside.recipe.types import Node, Recipe
from deskside.render.bundle import CLUSTER_DIR
from deskside.secrets import master_key_file

ServiceKey = Literal["proxy", "prometheus", "grafana", "node_exporter", "exporter", "watch", "gate"]

MASTER_KEY_ENV = "LITELLM_MASTER_KEY"
"""The proxy's master key variable (LiteLLM's config names it: os.environ/...)."""
PROXY_ENV: tuple[tuple[str, str], ...] = (("LITELLM_LOCAL_MODEL_COST_MAP", "True"),)
"""The proxy's plain environment: no network at start-up, LiteLLM's bundled cost map."""
PROXY_SCRIPT = "run-proxy.sh"
PROXY_CONFIG = "config.yaml"
EXPORTER_RECIPE = "recipe.yaml"
"""The recipe deskside's exporter reads on every deployed node, in its bundle folder."""
IN_CONTAINER = "/deskside"
"""Where the head's cluster files are mounted in the service containers."""

PER_NODE: tuple[ServiceKey, ...] = ("node_exporter", "exporter")
WHAT: dict[ServiceKey, str] = {
    "proxy": "LiteLLM proxy",
    "prometheus": "Prometheus",
    "grafana": "Grafana",
    "node_exporter": "node_exporter",
    "exporter": "deskside node exporter",
    "watch": "deskside node watch",
    "gate": "drain gate",
}


@dataclass(frozen=True)
class Mount:
    """A bind mount of a service's (or the engine's) container."""

    source: str  # on the host
    target: str  # in the container
    read_only: bool = False
    created: bool = False  # deskside creates the source before the start (data, caches)
    propagation: str | None = None  # "rslave": mounts made later on the host show inside


@dataclass(frozen=True)
class SecretEnv:
    """A secret variable of a service: its name and the 0600 file its value is read from
    at start (`value`: the file holds the value; `assignments`: NAME=value lines)."""

    name: str
    file: str
    form: Literal["value", "assignments"]


@dataclass(frozen=True)
class Container:
    """How a service runs in its image under Docker Compose."""

    image: str
    entrypoint: tuple[str, ...] | None  # None: the image's own, given `command`
    command: tuple[str, ...]
    mounts: tuple[Mount, ...]
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Service:
    """One process deskside starts beside the engines, on one node."""

    name: ServiceKey  # the name records, logs and run tags use
    node: str
    program: str  # the service's own program as the site names it; "" without one
    argv: tuple[str, ...]  # natively, the whole command line; () when only its image runs it
    container: Container | None  # in its image; None when it has none
    in_container: bool  # this site runs it in its image
    ready_url: str  # "" when it serves nothing (up while it runs)
    ports: tuple[int, ...]
    secrets: tuple[SecretEnv, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # set by its start (the proxy's: run-proxy.sh)
    workdir: str | None = None

    @property
    def slug(self) -> str:
        """Its name in unit file names and Compose files (node-exporter)."""
        return self.name.replace("_", "-")

    @property
    def what(self) -> str:
        return WHAT[self.name]

    @property
    def per_node(self) -> bool:
        """One on every node (node_exporter, exporter), not the cluster's one on the head."""
        return self.name in PER_NODE

    @property
    def mounts(self) -> tuple[Mount, ...]:
        return self.container.mounts if self.container is not None else ()


@dataclass(frozen=True)
class ServiceSite:
    """Where the services run from: the folders of their files, the programs that run
    deskside and LiteLLM there, and whether services with an image run in it."""

    cluster: str  # the head's cluster files: prometheus/, grafana/, litellm/
    secrets: str  # deskside's 0700 secrets folder where the proxy runs
    exporter_recipe: str  # the recipe deskside's exporters read
    state_dirs: Mapping[str, str]  # node -> its state folder (what deskside started there)
    data: Mapping[str, str]  # service -> the head's folder of its data
    deskside: tuple[str, ...]  # runs deskside's CLI
    litellm: str  # the LiteLLM program
    containers: bool  # services that have an image run in it (runtime.kind container)
    watcher: bool = False  # `deskside watch` runs beside the head (this machine)
    workdir: str | None = None

    @classmethod
    def deployed(cls, recipe: Recipe) -> ServiceSite:
        """Nodes that receive a rendered bundle: the release under `current`, the data and
        secrets under `runtime.root`/<recipe>, the programs the recipe names."""
        layout = NodeLayout.of(recipe)
        return cls(
            cluster=f"{layout.current}/{CLUSTER_DIR}",
            secrets=layout.secrets,
            exporter_recipe=f"{layout.current}/{EXPORTER_RECIPE}",
            state_dirs={n.name: layout.recipe_dir for n in recipe.cluster.nodes},
            data={s: layout.service_data(s) for s in ("prometheus", "grafana")},
            deskside=(recipe.monitoring.deskside,),
            litellm=recipe.proxy.litellm,
            containers=recipe.runtime.kind == "container",
        )

    @classmethod
    def this_machine(
        cls, recipe: Recipe, run_dir: str, secrets: str, python: str, litellm: str
    ) -> ServiceSite:
        """A run on this machine: its files under `run_dir`, every node's state under
        run_dir/nodes/<node>, its keys in `secrets`, deskside's CLI under `python`, the
        LiteLLM program found here; processes, never containers, and the watcher."""
        return cls(
            cluster=f"{run_dir}/{CLUSTER_DIR}",
            secrets=secrets,
            exporter_recipe=f"{run_dir}/{CLUSTER_DIR}/{EXPORTER_RECIPE}",
            state_dirs={n.name: f"{run_dir}/nodes/{n.name}" for n in recipe.cluster.nodes},
            data={s: f"{run_dir}/{s}-data" for s in ("prometheus", "grafana")},
            deskside=(python, "-m", "deskside.cli"),
            litellm=litellm,
            containers=False,
            watcher=True,
            workdir=run_dir,
        )

    @property
    def proxy_dir(self) -> str:
        """The proxy's config.yaml and run-proxy.sh."""
        return f"{self.cluster}/litellm"

    @property
    def engine_env(self) -> str:
        """The head engine's key file, which the proxy reads too."""
        return f"{self.secrets}/{ENGINE_ENV_FILE}"


def url(host: str, port: int, path: str = "") -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"


See = Callable[[str], str]


def seen_through(mounts: Sequence[Mount]) -> See:
    """A host path as a container with `mounts` sees it (the longest source wins)."""
    ordered = sorted(mounts, key=lambda m: len(m.source), reverse=True)

    def see(path: str) -> str:
        for m in ordered:
            if path == m.source:
                return m.target
            prefix = m.source.rstrip("/") + "/"
            if path.startswith(prefix):
                return m.target.rstrip("/") + "/" + path[len(prefix) :]
        return path

    return see


def _native(path: str) -> str:
    return path


def proxy_service(
    recipe: Recipe,
    *,
    node: str,
    host: str,
    folder: str,
    litellm: str,
    master_key: str,
    keys_file: str,
    key_names: Sequence[str],
    image: str | None = None,
    containers: bool = False,
    workdir: str | None = None,
) -> Service:
    """The LiteLLM proxy (a recipe's or a replica set's): run-proxy.sh in `folder` reads the
    master key and the engines' keys (`key_names`, NAME=value lines of `keys_file`), then
    execs LiteLLM with the config beside it, listening on `host`."""
    port = recipe.proxy.port
    mounts = (
        Mount(folder, f"{IN_CONTAINER}/litellm", read_only=True),
        Mount(master_key, master_key, read_only=True),
        Mount(keys_file, keys_file, read_only=True),
    )

    def argv(see: See, program: str) -> tuple[str, ...]:
        return (
            "/bin/sh",
            f"{see(folder)}/{PROXY_SCRIPT}",
            see(master_key),
            see(keys_file),
            program,
            "--config",
            f"{see(folder)}/{PROXY_CONFIG}",
            "--host",
            host,
            "--port",
            str(port),
        )

    container = None
    if image is not None:  # the image's own `litellm`
        container = Container(image, argv(seen_through(mounts), "litellm"), (), mounts)
    return Service(
        name="proxy",
        node=node,
        program=litellm,
        argv=argv(_native, litellm),
        container=container,
        in_container=container is not None and containers,
        ready_url=url(host, port, "/health/liveliness"),
        ports=(port,),
        secrets=(
            SecretEnv(MASTER_KEY_ENV, master_key, "value"),
            *(SecretEnv(name, keys_file, "assignments") for name in key_names),
        ),
        env=PROXY_ENV,
        workdir=workdir,
    )


def _prometheus(recipe: Recipe, site: ServiceSite) -> Service:
    mon, head = recipe.monitoring, recipe.head
    config = f"{site.cluster}/prometheus"
    data = site.data["prometheus"]
    mounts = (
        Mount(config, f"{IN_CONTAINER}/prometheus", read_only=True),
        Mount(data, "/prometheus", created=True),
    )

    def args(see: See) -> tuple[str, ...]:
        return (
            f"--config.file={see(config)}/prometheus.yml",
            f"--storage.tsdb.path={see(data)}",
            f"--web.listen-address={head.address}:{mon.prometheus_port}",
        )

    container = Container(mon.images.prometheus, None, args(seen_through(mounts)), mounts)
    return Service(
        name="prometheus",
        node=head.name,
        program=mon.prometheus,
        argv=(mon.prometheus, *args(_native)),
        container=container,
        in_container=site.containers,
        # ready to serve queries (/-/healthy answers before the storage is open)
        ready_url=url(head.address, mon.prometheus_port, "/-/ready"),
        ports=(mon.prometheus_port,),
        workdir=site.workdir,
    )


def _grafana(recipe: Recipe, site: ServiceSite) -> Service:
    mon, head = recipe.monitoring, recipe.head
    mounts = (
        Mount(f"{site.cluster}/grafana", f"{IN_CONTAINER}/grafana", read_only=True),
        Mount(site.data["grafana"], "/var/lib/grafana", created=True),
    )
    see = seen_through(mounts)
    env = (
        ("GF_SERVER_HTTP_ADDR", head.address),
        ("GF_SERVER_HTTP_PORT", str(mon.grafana_port)),
        ("GF_PATHS_PROVISIONING", see(f"{site.cluster}/grafana/provisioning")),
        # the nodes may have no way out: no update checks, no usage reports
        ("GF_ANALYTICS_REPORTING_ENABLED", "false"),
        ("GF_ANALYTICS_CHECK_FOR_UPDATES", "false"),
        ("GF_ANALYTICS_CHECK_FOR_PLUGIN_UPDATES", "false"),
    )
    return Service(
        name="grafana",
        node=head.name,
        program="",
        argv=(),  # its home, plugins and configuration folders come with the image
        container=Container(mon.images.grafana, None, (), mounts, env),
        in_container=True,
        ready_url=url(head.address, mon.grafana_port, "/api/health"),
        ports=(mon.grafana_port,),
    )


def _node_exporter(recipe: Recipe, node: Node, site: ServiceSite) -> Service:
    mon = recipe.monitoring
    # the host's filesystems, read-only, for the filesystem and infiniband collectors
    mounts = (Mount("/", "/host", read_only=True, propagation="rslave"),)

    def args(see: See) -> tuple[str, ...]:
        return (
            f"--path.rootfs={see('/')}",
            f"--web.listen-address={node.address}:{mon.node_exporter_port}",
        )

    container = Container(mon.images.node_exporter, None, args(seen_through(mounts)), mounts)
    return Service(
        name="node_exporter",
        node=node.name,
        program=mon.node_exporter,
        argv=(mon.node_exporter, *args(_native)),
        container=container,
        in_container=site.containers,
        ready_url=url(node.address, mon.node_exporter_port, "/metrics"),
        ports=(mon.node_exporter_port,),
        workdir=site.workdir,
    )


def _exporter(node: Node, site: ServiceSite) -> Service:
    # natively under every runtime: it reads the node's sysfs, /proc and NVML
    argv = (
        *site.deskside,
        "node",
        "exporter",
        site.exporter_recipe,
        "--node",
        node.name,
        "--host",
        node.address,
        "--port",
        str(EXPORTER_PORT),
        # the node's state: the guard's stop and the watcher's record
        "--state-dir",
        site.state_dirs[node.name],
    )
    return Service(
        name="exporter",
        node=node.name,
        program=site.deskside[0],
        argv=argv,
        container=None,
        in_container=False,
        ready_url=url(node.address, EXPORTER_PORT, "/metrics"),
        ports=(EXPORTER_PORT,),
        workdir=site.workdir,
    )


def _watch(recipe: Recipe, site: ServiceSite) -> Service:
    return Service(
        name="watch",
        node=recipe.head.name,
        program=site.deskside[0],
        argv=(*site.deskside, "node", "watch", recipe.name),
        container=None,
        in_container=False,
        ready_url="",
        ports=(),
        workdir=site.workdir,
    )


def services(recipe: Recipe, site: ServiceSite) -> list[Service]:
    """Every service the recipe enables, in the order they start: the head's (proxy,
    Prometheus, Grafana), then each node's (node_exporter, exporter) in recipe order,
    then the watcher. A replica set's one proxy is `proxy_service` of its own place."""
    head = recipe.head
    out: list[Service] = []
    if recipe.runs_proxy and recipe.replicas is None:
        out.append(
            proxy_service(
                recipe,
                node=head.name,
                host=head.address,
                folder=site.proxy_dir,
                litellm=site.litellm,
                master_key=master_key_file(recipe, site.secrets),
                keys_file=site.engine_env,
                key_names=(ENGINE_KEY_ENV,),
                image=recipe.proxy.image,
                containers=site.containers,
                workdir=site.workdir,
            )
        )
    if recipe.monitoring.enabled:
        out += [_prometheus(recipe, site), _grafana(recipe, site)]
        for node in recipe.cluster.nodes:
            out += [_node_exporter(recipe, node, site), _exporter(node, site)]
    if recipe.survive.watch and site.watcher:
        out.append(_watch(recipe, site))
    return out


__all__ = [
    "MASTER_KEY_ENV",
    "Container",
    "Mount",
    "SecretEnv",
    "Service",
    "ServiceSite",
    "proxy_service",
    "seen_through",
    "services",
]

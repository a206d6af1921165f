"""The services a run on this machine starts beside its engines, as processes: the LiteLLM
proxy on the head (`proxy.enabled`), and with `monitoring.enabled` Prometheus on the head,
node_exporter and deskside's exporter on every node — each in its node's network namespace,
listening on the node's address, so Prometheus scrapes exactly the targets of the rendered
configuration.

Pure: which programs, argv, environment and readiness URL; `deskside.runtime.local` spawns
them (pid, start time and run tag recorded like the engine's) and `down` stops them.
Secrets never appear in an argv or an environment listing: the proxy's keys are read from
their 0600 files by a small shell prologue at start.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from deskside.exporter.series import EXPORTER_PORT
from deskside.home import deskside_home
from deskside.recipe.types import Node, Recipe

LITELLM_ENV = "DESKSIDE_LITELLM"
"""An explicit LiteLLM program for runs on this machine (wins over the PATH and the
virtualenv `deskside proxy install` makes)."""

MANAGED_PROXY_DIR = "litellm"
"""`deskside proxy install` puts its virtualenv in $DESKSIDE_HOME/litellm."""


def programs(recipe: Recipe, service: str) -> tuple[str, ...]:
    """The programs that may run `service` here: the recipe's, then upstream's name
    (Debian and Ubuntu call node_exporter prometheus-node-exporter)."""
    mon = recipe.monitoring
    if service == "prometheus":
        return (mon.prometheus,)
    if service == "node_exporter":
        return tuple(dict.fromkeys((mon.node_exporter, "node_exporter")))
    return ()


INSTALL_HINTS: dict[str, str] = {
    "prometheus": "install Prometheus (Debian/Ubuntu: apt install prometheus), or set "
    "monitoring.enabled: false",
    "node_exporter": "install node_exporter (Debian/Ubuntu: apt install "
    "prometheus-node-exporter), or set monitoring.enabled: false",
    "proxy": "install the pinned LiteLLM proxy: deskside proxy install (or set "
    "proxy.enabled: false)",
}

# The proxy's start: keys from their files (never in argv or a listed environment), then
# exec LiteLLM. $1 master key file, $2 engine env file, $3.. the LiteLLM argv.
PROXY_PROLOGUE = (
    "set -eu; "
    'LITELLM_MASTER_KEY=$(cat "$1"); export LITELLM_MASTER_KEY; '
    'set -a; . "$2"; set +a; '
    "LITELLM_LOCAL_MODEL_COST_MAP=True; export LITELLM_LOCAL_MODEL_COST_MAP; "
    'shift 2; exec "$@"'
)

# The head engine's start behind a proxy: its key from the 0600 env file, then exec.
ENV_FILE_PROLOGUE = 'set -a; . "$1"; set +a; shift; exec "$@"'


@dataclass(frozen=True)
class ServiceLaunch:
    """How one service starts on one node, and the URL that answers 200 once it is up."""

    name: str  # a ServiceName, or grafana (never a recorded process)
    node: str
    argv: tuple[str, ...]
    ready_url: str  # "" when the service serves nothing (up while it runs)
    what: str


@dataclass(frozen=True)
class ServiceFiles:
    """Where a run on this machine keeps its services' files."""

    cluster: Path  # the rendered cluster/ folder (Prometheus config and rules, LiteLLM config)
    prometheus_data: Path
    recipe: Path  # the recipe as this run uses it, for the exporters
    master_key: Path
    engine_env: Path
    state_dirs: Mapping[str, str] = field(default_factory=dict)  # node: its state folder


def with_env_file(argv: Sequence[str], env_file: str) -> tuple[str, ...]:
    """`argv` started with the variables of `env_file` (a `NAME=value` file) in its
    environment; the session leader execs into `argv`, so its pid stays the one recorded."""
    return ("sh", "-c", ENV_FILE_PROLOGUE, "deskside-engine", env_file, *argv)


def find_program(candidates: Sequence[str]) -> str | None:
    """The first of `candidates` on the PATH, by name (the PATH finds it again at start)."""
    return next((name for name in candidates if shutil.which(name)), None)


def litellm_program(recipe: Recipe) -> str | None:
    """The LiteLLM program for a run on this machine: $DESKSIDE_LITELLM, else the recipe's
    `proxy.litellm` (an absolute path, or a name on the PATH), else the virtualenv of
    `deskside proxy install`. None when none of them exists."""
    explicit = os.environ.get(LITELLM_ENV)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    configured = recipe.proxy.litellm
    if "/" in configured:
        return configured if os.access(configured, os.X_OK) else None
    if shutil.which(configured):
        return configured  # by name: the PATH finds it again at start
    managed = deskside_home() / MANAGED_PROXY_DIR / "bin" / "litellm"
    return str(managed) if os.access(managed, os.X_OK) else None


def wanted(recipe: Recipe) -> list[str]:
    """The services the recipe enables (proxy, prometheus, node_exporter, exporter)."""
    out = ["proxy"] if recipe.runs_proxy else []
    if recipe.monitoring.enabled:
        out += ["prometheus", "node_exporter", "exporter"]
    if recipe.survive.watch:
        out.append("watch")
    return out


def missing(recipe: Recipe) -> list[tuple[str, str]]:
    """(service, how to install it) for every enabled service whose program is missing."""

    def installed(name: str) -> bool:
        if name == "proxy":
            return litellm_program(recipe) is not None
        return not programs(recipe, name) or find_program(programs(recipe, name)) is not None

    return [(name, INSTALL_HINTS[name]) for name in wanted(recipe) if not installed(name)]


def ready_url(recipe: Recipe, node: Node, service: str) -> str:
    """The URL that answers 200 once `service` (a ServiceName, or grafana) runs on `node`
    (none for `watch`, which serves nothing: it is up while it runs)."""
    mon, head = recipe.monitoring, recipe.head.address
    host, port, path = {
        "proxy": (head, recipe.proxy.port, "/health/liveliness"),
        "prometheus": (head, mon.prometheus_port, "/-/ready"),
        "grafana": (head, mon.grafana_port, "/api/health"),
        "node_exporter": (node.address, mon.node_exporter_port, "/metrics"),
        "exporter": (node.address, EXPORTER_PORT, "/metrics"),
    }[service]
    return f"http://{host}:{port}{path}"


def service_launches(
    recipe: Recipe, files: ServiceFiles, python: str, skip: Sequence[str] = ()
) -> list[ServiceLaunch]:
    """Every enabled service of the run (minus `skip`), head's first."""
    head: Node = recipe.head
    out: list[ServiceLaunch] = []
    names = [n for n in wanted(recipe) if n not in skip]
    if "proxy" in names:
        program = litellm_program(recipe) or recipe.proxy.litellm
        port = recipe.proxy.port
        argv: tuple[str, ...] = (
            "sh",
            "-c",
            PROXY_PROLOGUE,
            "deskside-proxy",
            str(files.master_key),
            str(files.engine_env),
            program,
            "--config",
            str(files.cluster / "litellm" / "config.yaml"),
            "--host",
            head.address,
            "--port",
            str(port),
        )
        out.append(
            ServiceLaunch(
                "proxy",
                head.name,
                argv,
                ready_url(recipe, head, "proxy"),
                "starting the LiteLLM proxy",
            )
        )
    mon = recipe.monitoring
    if "prometheus" in names:
        program = find_program(programs(recipe, "prometheus")) or recipe.monitoring.prometheus
        argv = (
            program,
            f"--config.file={files.cluster / 'prometheus' / 'prometheus.yml'}",
            f"--storage.tsdb.path={files.prometheus_data}",
            f"--web.listen-address={head.address}:{mon.prometheus_port}",
        )
        out.append(
            ServiceLaunch(
                "prometheus",
                head.name,
                argv,
                ready_url(recipe, head, "prometheus"),
                "starting Prometheus",
            )
        )
    for node in recipe.cluster.nodes:
        if "node_exporter" in names:
            program = find_program(programs(recipe, "node_exporter")) or mon.node_exporter
            address = f"{node.address}:{mon.node_exporter_port}"
            out.append(
                ServiceLaunch(
                    "node_exporter",
                    node.name,
                    (program, f"--web.listen-address={address}"),
                    ready_url(recipe, node, "node_exporter"),
                    "starting node_exporter",
                )
            )
        if "exporter" in names:
            argv = (
                python,
                "-m",
                "deskside.cli",
                "exporter",
                "--recipe",
                str(files.recipe),
                "--node",
                node.name,
                "--host",
                node.address,
                "--port",
                str(EXPORTER_PORT),
            )
            if node.name in files.state_dirs:  # the guard's stop reads the node's state
                argv += ("--state-dir", files.state_dirs[node.name])
            out.append(
                ServiceLaunch(
                    "exporter",
                    node.name,
                    argv,
                    ready_url(recipe, node, "exporter"),
                    "starting deskside's exporter",
                )
            )
    if "watch" in names:
        argv = (python, "-m", "deskside.cli", "watch", "--recipe", recipe.name)
        out.append(ServiceLaunch("watch", head.name, argv, "", "starting deskside watch"))
    return out

"""The services a run on this machine starts beside its engines, as processes: the service
table's (`deskside.engine.services`) for this machine — the LiteLLM proxy on the head
(`proxy.enabled`), with `monitoring.enabled` Prometheus on the head, node_exporter and
deskside's exporter on every node, and `deskside watch` (`survive.watch`) — each in its
node's network namespace, listening on the node's address, so Prometheus scrapes exactly
the targets of the rendered configuration.

Here: where such a run keeps its services' files (`local_site`), which LiteLLM program it
runs, and which enabled services are not installed. `deskside.runtime.local` spawns them
(pid, start time and run tag recorded like the engine's) and `down` stops them. Secrets
never appear in an argv or an environment listing: the proxy's run-proxy.sh and the head
engine's prologue read them from their 0600 files at start.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from deskside import secrets
from deskside.engine.services import Service, ServiceSite
from deskside.home import deskside_home
from deskside.recipe.types import Recipe

LITELLM_ENV = "DESKSIDE_LITELLM"
"""An explicit LiteLLM program for runs on this machine (wins over the PATH and the
virtualenv `deskside proxy install` makes)."""

MANAGED_PROXY_DIR = "litellm"
"""`deskside proxy install` puts its virtualenv in $DESKSIDE_HOME/litellm."""

INSTALL_HINTS: dict[str, str] = {
    "prometheus": "install Prometheus (Debian/Ubuntu: apt install prometheus) or name its "
    "program in monitoring.prometheus, or set monitoring.enabled: false",
    "node_exporter": "install node_exporter (Debian/Ubuntu: apt install "
    "prometheus-node-exporter) or name its program in monitoring.node_exporter (upstream's "
    "release: node_exporter), or set monitoring.enabled: false",
    "proxy": "install the pinned LiteLLM proxy: deskside proxy install (or set "
    "proxy.enabled: false)",
}

# The head engine's start behind a proxy: its key from the 0600 env file, then exec.
ENV_FILE_PROLOGUE = 'set -a; . "$1"; set +a; shift; exec "$@"'


def with_env_file(argv: Sequence[str], env_file: str) -> tuple[str, ...]:
    """`argv` started with the variables of `env_file` (a `NAME=value` file) in its
    environment; the session leader execs into `argv`, so its pid stays the one recorded."""
    return ("sh", "-c", ENV_FILE_PROLOGUE, "deskside-engine", env_file, *argv)


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


def local_site(recipe: Recipe, run_dir: Path, python: str) -> ServiceSite:
    """Where a run on this machine keeps its services' files (under `run_dir`, its keys in
    $DESKSIDE_HOME/secrets/<recipe>), and the programs it runs them with."""
    return ServiceSite.this_machine(
        recipe,
        str(run_dir),
        str(secrets.secrets_dir(recipe.name)),
        python,
        litellm_program(recipe) or recipe.proxy.litellm,
    )


def missing(recipe: Recipe, table: Sequence[Service]) -> list[tuple[str, str]]:
    """(service, how to install it) for every service of `table` whose program is not
    here: LiteLLM (`litellm_program`), Prometheus and node_exporter on the PATH."""
    out: list[tuple[str, str]] = []
    for s in table:
        if s.name == "proxy":
            installed = litellm_program(recipe) is not None
        elif s.name in ("prometheus", "node_exporter"):
            installed = shutil.which(s.program) is not None
        else:
            continue  # deskside's own CLI, under this Python
        if not installed and s.name not in (name for name, _ in out):
            out.append((s.name, INSTALL_HINTS[s.name]))
    return out

"""Starting a run's services on this machine: their files (the rendered Prometheus and
LiteLLM configuration, the recipe as run) and the wait until each answers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx

from deskside.engine.services import PROXY_CONFIG, PROXY_SCRIPT, Service, ServiceSite
from deskside.errors import DesksideError
from deskside.httpclient import METRICS, Limits
from deskside.httpclient import client as bounded_client
from deskside.layout import NodeLayout
from deskside.planner.plan import Plan
from deskside.recipe.types import Recipe
from deskside.render.bundle import CLUSTER_DIR
from deskside.runtime import node_sh
from deskside.runtime.control import Control
from deskside.runtime.ops import Executed
from deskside.safefs import make_dirs, write_file
from deskside.transport.base import Transport

SERVICE_FILES = ("prometheus/", f"litellm/{PROXY_CONFIG}", f"litellm/{PROXY_SCRIPT}")
"""The rendered cluster files a run on this machine uses (the rest is for deployed nodes)."""


def recipe_as_run(recipe: Recipe) -> bytes:
    """The recipe exactly as this run uses it (JSON is YAML), for the exporters: a recipe
    adjusted in memory (the demo's loopback variant) reaches them as it runs."""
    data = recipe.model_dump(mode="json", exclude_none=True)
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def write_service_files(recipe: Recipe, recipe_path: Path, plan: Plan, site: ServiceSite) -> None:
    """The rendered Prometheus and LiteLLM files in the site's cluster folder, the recipe as
    run where the exporters read it, Prometheus's data folder."""
    from deskside.render.assemble import render  # only a start renders: status stays light

    bundle = render(recipe, recipe_path, plan)
    prefix = CLUSTER_DIR + "/"
    for path, data in bundle.items():
        rel = path.removeprefix(prefix)
        if path.startswith(prefix) and rel.startswith(SERVICE_FILES):
            write_file(Path(site.cluster) / rel, data, bundle.mode(path))
    write_file(Path(site.exporter_recipe), recipe_as_run(recipe), 0o644)
    if recipe.monitoring.enabled:
        make_dirs(Path(site.data["prometheus"]))


def _tail(t: Transport, log: str) -> str:
    r = t.run(node_sh.tail_file(log, 12), timeout=30)
    return r.stdout.strip()


def wait_services(
    launches: list[Service],
    done: Executed,
    transports: Mapping[str, Transport],
    layouts: Mapping[str, NodeLayout],
    *,
    timeout: float,
    interval: float,
    say: Callable[[str], None],
    http_transport: httpx.BaseTransport | None = None,
) -> None:
    """Until every service answers 200 at its URL; a service that exits, or does not answer
    within `timeout`, fails the start with its last log lines."""
    pending = {(sl.node, sl.name): sl for sl in launches}
    deadline = time.monotonic() + timeout
    with bounded_client(Limits(total=5, max_bytes=METRICS.max_bytes), http_transport) as client:
        while pending:
            for key, sl in list(pending.items()):
                try:
                    if sl.ready_url and client.get(sl.ready_url).status_code == 200:
                        del pending[key]
                        say(f"{sl.node}: {sl.name} answers at {sl.ready_url}")
                        continue
                except httpx.HTTPError:
                    pass
                node_state = done.states.get(sl.node)
                state = node_state.service(sl.name) if node_state else None  # type: ignore[arg-type]
                if state is None:  # under systemd or Compose: no process of deskside's own
                    continue
                t = transports[sl.node]
                control = Control("process", "native", layouts[sl.node])
                if not control.service_alive(t, state):
                    raise DesksideError(
                        f"{sl.node}: {sl.name} exited while starting; last lines of "
                        f"{state.log}:\n{_tail(t, state.log)}",
                        hint="see the whole log; `deskside status` lists the services",
                    )
                if not sl.ready_url:  # serves nothing: up while it runs
                    del pending[key]
                    say(f"{sl.node}: {sl.name} runs")
            if not pending:
                break
            if time.monotonic() > deadline:
                names = ", ".join(f"{n}@{node}" for node, n in pending)
                raise DesksideError(
                    f"{names} did not answer within {timeout:.0f} s",
                    hint="see their logs under "
                    + ", ".join(sorted({layouts[node].logs for node, _ in pending})),
                )
            time.sleep(interval)

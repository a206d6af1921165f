"""Per-node `compose.yaml` for the container runtime (docs/flagship.md #31-#33, as public
two-Spark stacks run it): the engine image pinned by digest, host network and IPC, a large /dev/shm,
unlimited memlock, `/dev/infiniband` for RoCE, `restart: unless-stopped`, the Hugging Face
cache and the autotune/compile cache as volumes, the environment from node.env, and
launch.sh (mounted read-only) as the entrypoint. The head's engine has a healthcheck on
vLLM's /health (with the image's python3), started late enough for the model to load;
workers are headless (no HTTP server), so theirs have none.

Every string goes through `quote.compose_string`: Compose interpolates `$` in all values.
The labels carry the sha256 of launch.sh, so a changed launch recreates the container on
`docker compose up -d` even when compose.yaml itself would not change otherwise.
"""

from __future__ import annotations

from typing import Any

from deskside.engine.services import Mount
from deskside.layout import NodeLayout
from deskside.recipe.types import Recipe
from deskside.render.bundle import sha256_hex
from deskside.render.context import (
    CONTAINER_HOME_CACHE,
    LAUNCH_IN_CONTAINER,
    NodeContext,
    RenderContext,
)
from deskside.render.quote import compose_string
from deskside.render.serialize import comment_header, yaml_text

SERVICE = "engine"
"""The Compose service name of the engine on every node."""

ENGINE_START_PERIOD = "30m"
"""How long the head's healthcheck waits before failures count: a first start loads the
weights, autotunes FlashInfer and profiles the KV cache, which on GB10 takes many minutes."""


def python_check(url: str, start_period: str) -> dict[str, Any]:
    """A Compose healthcheck with the image's python3 (vLLM's and LiteLLM's have one)."""
    code = f"import urllib.request; urllib.request.urlopen({url!r}, timeout=10)"
    return {
        "test": ["CMD", "python3", "-c", compose_string(code)],
        "interval": "30s",
        "timeout": "15s",
        "retries": 3,
        "start_period": start_period,
    }


def bind(
    source: str, target: str, *, read_only: bool = False, propagation: str | None = None
) -> Any:
    """A long-syntax bind mount. Its source must exist: deskside creates the ones it owns
    when it deploys (`Mount.created`; `bind.create_host_path` would, but Compose v1.29
    refuses that key)."""
    volume: dict[str, Any] = {
        "type": "bind",
        "source": compose_string(source),
        "target": compose_string(target),
    }
    if read_only:
        volume["read_only"] = True
    if propagation is not None:
        volume["bind"] = {"propagation": propagation}
    return volume


def extra_mount(spec: str) -> Mount:
    """A `runtime.volumes` entry, 'SOURCE:TARGET[:ro|:rw]'."""
    source, target, *mode = spec.split(":")
    return Mount(source, target, read_only=mode == ["ro"])


def engine_caches(recipe: Recipe, layout: NodeLayout) -> list[Mount]:
    """The engine container's caches, which deskside creates on the node: the Hugging Face
    cache (the same path inside) and ~/.cache (vLLM's and FlashInfer's caches)."""
    return [
        Mount(recipe.runtime.hf_cache, recipe.runtime.hf_cache, created=True),
        Mount(layout.cache, CONTAINER_HOME_CACHE, created=True),
    ]


def engine_mounts(ctx: RenderContext) -> list[Mount]:
    """The engine container's bind mounts: launch.sh (read-only), the caches, a local model
    folder (read-only), then the recipe's `runtime.volumes`."""
    mounts = [
        Mount("./launch.sh", LAUNCH_IN_CONTAINER, read_only=True),
        *engine_caches(ctx.recipe, ctx.layout),
    ]
    if ctx.recipe.model.path is not None:
        # a local model folder: pushed under R/N/models/ (or an absolute path on the node)
        mounts.append(Mount(ctx.model, ctx.model, read_only=True))
    return mounts + [extra_mount(spec) for spec in ctx.recipe.runtime.volumes]


def compose_data(ctx: RenderContext, n: NodeContext, launch_sh: bytes) -> dict[str, Any]:
    recipe = ctx.recipe
    runtime = recipe.runtime
    assert recipe.engine.image is not None  # the recipe rules require it for containers
    volumes = [bind(m.source, m.target, read_only=m.read_only) for m in engine_mounts(ctx)]
    service: dict[str, Any] = {
        "image": compose_string(recipe.engine.image),
        "entrypoint": ["/bin/sh", LAUNCH_IN_CONTAINER],
        "init": True,
        "network_mode": "host",
        "ipc": "host",
        "shm_size": compose_string(runtime.shm_size),
        "ulimits": {"stack": 67108864},
        "restart": "unless-stopped",
        "stop_grace_period": "2m",
        # the engine key (head behind a proxy) from its 0600 file, never in the bundle
        "env_file": ["node.env"]
        + ([compose_string(n.launch.secret_env_file)] if n.launch.secret_env_file else []),
        "volumes": volumes,
    }
    if ctx.memory_max is not None:
        service["mem_limit"] = ctx.memory_max
    if recipe.cluster.fabric.transport == "roce":
        # RDMA pins the memory it registers: unlimited memlock (raising it needs privilege
        # a TCP fabric does not)
        service["ulimits"]["memlock"] = -1
        service["devices"] = ["/dev/infiniband:/dev/infiniband"]
        service["cap_add"] = ["IPC_LOCK"]
    if recipe.engine.device == "gpu":
        service["deploy"] = {
            "resources": {
                "reservations": {
                    "devices": [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
                }
            }
        }
    if n.launch.probe_url is not None and n.launch.role == "head":
        service["healthcheck"] = python_check(f"{n.launch.probe_url}/health", ENGINE_START_PERIOD)
    service["labels"] = {
        "io.deskside.recipe": recipe.name,
        "io.deskside.node": n.name,
        "io.deskside.role": n.launch.role,
        "io.deskside.node-rank": str(n.launch.node_rank),
        "io.deskside.launch-sha256": sha256_hex(launch_sh),
    }
    # no top-level `name:` (Compose v1.29 refuses it): every command passes --project-name
    return {"services": {SERVICE: service}}


def render_compose(ctx: RenderContext, n: NodeContext, launch_sh: bytes) -> str:
    header = comment_header(
        f"{ctx.recipe.name}: the vLLM engine of node {n.name} ({n.launch.role}, node rank "
        f"{n.launch.node_rank}) under Docker Compose.",
        f"Rendered by `deskside render` from {ctx.recipe_file}.",
        "Change the recipe and render again rather than editing this file.",
    )
    return yaml_text(compose_data(ctx, n, launch_sh), header)

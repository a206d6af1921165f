"""The replica set's LiteLLM proxy (pure): every served name and alias routed over every
group's engine (through the group's drain gate, `deskside.replicas.gate`), with LiteLLM's
own retries, cooldowns and background health checks.

Why LiteLLM's router: it is already the door of a one-engine recipe, and it has what a set
needs without another load balancer: several deployments under one `model_name`, a
routing strategy (`least-busy` counts the requests in flight per group), a retry on
another deployment when one fails, a cooldown that takes a failing group out of the
rotation for `cooldown_time` seconds after `allowed_fails` failures, and background health
checks (`health_check_interval`) whose failures route around a group until it passes
again (`enable_health_check_routing`). Each group's engine has its own key; the proxy reads
them from the environment (`key_env`), never from a rendered file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deskside.engine.launch import probe_url
from deskside.engine.services import MASTER_KEY_ENV, Service, proxy_service
from deskside.recipe.types import Recipe
from deskside.render.proxy import Backend, litellm_config
from deskside.render.serialize import comment_header, yaml_text

LOCAL_PROXY_HOST = "127.0.0.1"


def key_env(group: str) -> str:
    """The environment variable that holds `group`'s engine key in the proxy."""
    return "DESKSIDE_ENGINE_KEY_" + group.upper().replace("-", "_")


def backend_url(group_recipe: Recipe) -> str:
    """Where a group's engine answers (its head's API)."""
    return probe_url(group_recipe)


def gate_port(recipe: Recipe, index: int) -> int:
    """The port of the drain gate (`deskside.replicas.gate`) of the set's `index`-th group:
    the ports after the proxy's, on the proxy's host."""
    return recipe.proxy.port + 1 + index


def gate_url(recipe: Recipe, index: int) -> str:
    """Where the proxy reaches the `index`-th group: through its drain gate."""
    return f"http://{proxy_host(recipe)}:{gate_port(recipe, index)}"


def proxy_host(recipe: Recipe) -> str:
    """Where the set's proxy listens: the first group's head, or this machine's loopback
    when that head is a network namespace here."""
    return LOCAL_PROXY_HOST if recipe.head.netns else recipe.head.address


def set_proxy(
    recipe: Recipe,
    groups: Mapping[str, Recipe],
    *,
    node: str,
    folder: str,
    master_key: str,
    keys_file: str,
    litellm: str,
) -> Service:
    """The set's proxy as a service: run-proxy.sh in `folder` (this machine's, or the first
    group's head's) with the master key and every group's engine key (`keys_file`)."""
    return proxy_service(
        recipe,
        node=node,
        host=proxy_host(recipe),
        folder=folder,
        litellm=litellm,
        master_key=master_key,
        keys_file=keys_file,
        key_names=[key_env(group) for group in groups],
        workdir=folder,
    )


def set_litellm_config(
    recipe: Recipe, groups: Mapping[str, Recipe], max_model_len: Mapping[str, int]
) -> dict[str, Any]:
    """LiteLLM's config for the set: one deployment per (served name, group)."""
    assert recipe.replicas is not None
    r = recipe.replicas
    backends = [
        Backend(gate_url(recipe, i), key_env(group), max_model_len[group], group, r.timeout)
        for i, group in enumerate(groups)
    ]
    general: dict[str, Any] = {}
    if r.health_check_interval:
        general |= {
            "background_health_checks": True,
            "health_check_interval": r.health_check_interval,
        }
    router = {
        "routing_strategy": r.routing_strategy,
        "num_retries": r.num_retries,
        "allowed_fails": r.allowed_fails,
        "cooldown_time": r.cooldown_time,
        "timeout": r.timeout,
        "enable_health_check_routing": bool(r.health_check_interval),
    }
    return litellm_config(recipe.model.all_names, backends, router, general)


def render_set_config(
    recipe: Recipe,
    groups: Mapping[str, Recipe],
    max_model_len: Mapping[str, int],
    recipe_file: str,
) -> str:
    header = comment_header(
        f"{recipe.name}: LiteLLM routes {', '.join(recipe.model.all_names)} over the "
        f"engines of groups {', '.join(groups)}.",
        f"Rendered by `deskside render` from {recipe_file}.",
    )
    return yaml_text(set_litellm_config(recipe, groups, max_model_len), header)


def engines_env_text(keys: Mapping[str, str]) -> bytes:
    """The proxy's secret environment: every group's engine key under its variable."""
    return "".join(f"{key_env(group)}={value}\n" for group, value in keys.items()).encode()


__all__ = [
    "LOCAL_PROXY_HOST",
    "MASTER_KEY_ENV",
    "backend_url",
    "engines_env_text",
    "gate_port",
    "gate_url",
    "key_env",
    "proxy_host",
    "render_set_config",
    "set_litellm_config",
    "set_proxy",
]

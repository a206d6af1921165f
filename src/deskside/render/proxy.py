"""The LiteLLM proxy's files, for a recipe's head (`cluster/litellm/`) and a replica set
(`proxy/`, `deskside.replicas.render`) alike:

- `config.yaml` routes every served name and alias to the engines behind it (clients send
  the served name; docs/flagship.md #2);
- `run-proxy.sh MASTER_KEY_FILE KEYS_FILE LITELLM [ARG...]` reads the master key and the
  engines' keys from their 0600 files, sets the proxy's environment, and execs LiteLLM
  with the rest of its arguments. How it is called (natively, by a systemd unit, in
  LiteLLM's image under Compose) is the proxy's service (`deskside.engine.services`).

No key appears in a rendered file or on a command line: the config names environment
variables (`os.environ/NAME`, LiteLLM's own indirection), and the script fills them from
the files it is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deskside.engine.services import MASTER_KEY_ENV, PROXY_ENV, PROXY_SCRIPT
from deskside.layout import ENGINE_KEY_ENV
from deskside.render.context import RenderContext
from deskside.render.quote import sh
from deskside.render.serialize import comment_header, yaml_text


@dataclass(frozen=True)
class Backend:
    """An engine the proxy routes to."""

    api_base: str  # the engine's API server (http://host:port)
    key_env: str  # the proxy's variable that holds the engine's key
    max_model_len: int
    # a replica group: deployment ids `<group>/<name>` name it in LiteLLM's logs, health
    # results and cooldowns
    group: str | None = None
    timeout: float | None = None


def litellm_config(
    names: Sequence[str],
    backends: Sequence[Backend],
    router: dict[str, Any] | None = None,
    general: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """LiteLLM's config: one deployment per (served name, backend)."""
    model_list = []
    for name in names:
        for b in backends:
            params: dict[str, Any] = {
                # LiteLLM's vLLM provider: the part after the slash is the name sent to
                # vLLM, which answers to every --served-model-name
                "model": f"hosted_vllm/{name}",
                "api_base": f"{b.api_base}/v1",
                # the engine requires its own key behind the proxy (the proxy is the only
                # door); LiteLLM reads it from the environment run-proxy.sh sets up
                "api_key": f"os.environ/{b.key_env}",
            }
            if b.timeout is not None:
                params["timeout"] = b.timeout
            info: dict[str, Any] = {"id": f"{b.group}/{name}"} if b.group is not None else {}
            info["max_input_tokens"] = b.max_model_len
            model_list.append({"model_name": name, "litellm_params": params, "model_info": info})
    config: dict[str, Any] = {"model_list": model_list}
    if router is not None:
        config["router_settings"] = router
    config["general_settings"] = {"master_key": f"os.environ/{MASTER_KEY_ENV}", **(general or {})}
    return config


def render_litellm_config(ctx: RenderContext) -> str:
    header = comment_header(
        f"{ctx.recipe.name}: LiteLLM routes {', '.join(ctx.recipe.model.all_names)} to the "
        f"engine on {ctx.recipe.head.name}.",
        f"Rendered by `deskside render` from {ctx.recipe_file}.",
    )
    backend = Backend(ctx.api_base, ENGINE_KEY_ENV, ctx.plan.max_model_len)
    return yaml_text(litellm_config(ctx.recipe.model.all_names, [backend]), header)


def render_run_proxy(title: str, recipe_file: str) -> str:
    """run-proxy.sh (see the module docstring); `title` says whose proxy it starts."""
    usage = f"{PROXY_SCRIPT} MASTER_KEY_FILE KEYS_FILE LITELLM [ARG...]"
    lines = [
        "#!/bin/sh",
        f"# {title}",
        f"# Rendered by `deskside render` from {recipe_file}.",
        f"# Usage: {usage}",
        "# The keys are read from their files here: they are in no rendered file and on no",
        "# command line. KEYS_FILE holds the engines' keys (NAME=value lines).",
        "set -eu",
        "if [ $# -lt 3 ]; then",
        f"  echo 'usage: {usage}' >&2",
        "  exit 2",
        "fi",
        "key_file=$1; keys_file=$2; shift 2",
        'for f in "$key_file" "$keys_file"; do',
        '  if [ ! -r "$f" ]; then',
        "    printf 'deskside: key file %s is missing or unreadable\\n' \"$f\" >&2",
        "    exit 1",
        "  fi",
        "done",
        f'{MASTER_KEY_ENV}=$(cat "$key_file")',
        f"export {MASTER_KEY_ENV}",
        "set -a",
        "# shellcheck source=/dev/null",
        '. "$keys_file"',
        "set +a",
        "# no network at start-up: use the cost map bundled with LiteLLM",
        *(f"export {name}={sh(value)}" for name, value in PROXY_ENV),
        'exec "$@"',
    ]
    return "\n".join(lines) + "\n"


def render_head_run_proxy(ctx: RenderContext) -> str:
    recipe = ctx.recipe
    title = f"{recipe.name}: start the LiteLLM proxy on the head ({recipe.head.name})."
    return render_run_proxy(title, ctx.recipe_file)

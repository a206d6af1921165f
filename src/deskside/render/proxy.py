"""The LiteLLM proxy on the head: `cluster/litellm/config.yaml` routes the served name and
every alias to the engine on the head (clients send the served name; docs/flagship.md #2),
and `cluster/litellm/run-proxy.sh` starts it (natively, or in LiteLLM's image under Compose:
`deskside.render.services`).

The master key never appears in a rendered file: the config names an environment variable
(`os.environ/LITELLM_MASTER_KEY`, LiteLLM's own indirection) and run-proxy.sh reads the key
from its 0600 file on the head at start-up (`deskside.secrets`). The engine's own key
(VLLM_API_KEY, which the engine requires when the proxy fronts it) comes the same way from
the head's engine.env.
"""

from __future__ import annotations

from typing import Any

from deskside.layout import ENGINE_KEY_ENV
from deskside.render.context import RenderContext
from deskside.render.quote import sh
from deskside.render.serialize import comment_header, yaml_text

MASTER_KEY_ENV = "LITELLM_MASTER_KEY"
HEAD_KEY_FILE = "secrets/proxy-master-key"
"""Where deskside puts a generated master key on the head, under R/N/ (mode 0600)."""


def master_key_path(ctx: RenderContext) -> str:
    """The master key file on the head: the recipe's `proxy.master_key_file`, else the
    key deskside generates (see `deskside.secrets`), pushed to R/N/secrets/."""
    return ctx.recipe.proxy.master_key_file or f"{ctx.layout.recipe_dir}/{HEAD_KEY_FILE}"


def litellm_config(ctx: RenderContext) -> dict[str, Any]:
    api_base = f"{ctx.api_base}/v1"
    model_list = [
        {
            "model_name": name,
            "litellm_params": {
                # LiteLLM's vLLM provider: the part after the slash is the model name sent
                # to vLLM, which answers to every --served-model-name.
                "model": f"hosted_vllm/{name}",
                "api_base": api_base,
                # the engine requires its own key behind the proxy (the proxy is the only
                # door); LiteLLM reads it from the environment run-proxy.sh sets up
                "api_key": f"os.environ/{ENGINE_KEY_ENV}",
            },
            "model_info": {"max_input_tokens": ctx.plan.max_model_len},
        }
        for name in ctx.recipe.model.all_names
    ]
    return {
        "model_list": model_list,
        "general_settings": {"master_key": f"os.environ/{MASTER_KEY_ENV}"},
    }


def render_litellm_config(ctx: RenderContext) -> str:
    header = comment_header(
        f"{ctx.recipe.name}: LiteLLM routes {', '.join(ctx.recipe.model.all_names)} to the "
        f"engine on {ctx.recipe.head.name}.",
        f"Rendered by `deskside render` from {ctx.recipe_file}.",
    )
    return yaml_text(litellm_config(ctx), header)


def render_run_proxy(ctx: RenderContext) -> str:
    recipe = ctx.recipe
    key = sh(master_key_path(ctx))
    lines = [
        "#!/bin/sh",
        f"# {recipe.name}: start the LiteLLM proxy on the head ({recipe.head.name}).",
        f"# Rendered by `deskside render` from {ctx.recipe_file}.",
        "# The master key is read from its file here: it is in no rendered file and on no",
        "# command line.",
        "# Recipe values are literal on purpose:",
        "# shellcheck disable=SC1003,SC2016,SC2088",
        "set -eu",
        "case $0 in */*) here=${0%/*} ;; *) here=. ;; esac",
        f"key_file={key}",
        'if [ ! -r "$key_file" ]; then',
        "  printf 'deskside: proxy master key file %s is missing or unreadable\\n' "
        '"$key_file" >&2',
        "  exit 1",
        "fi",
        f'{MASTER_KEY_ENV}=$(cat "$key_file")',
        f"export {MASTER_KEY_ENV}",
        "# the engine's own key, which the proxy sends to it",
        f"engine_env={sh(ctx.layout.engine_env)}",
        'if [ ! -r "$engine_env" ]; then',
        "  printf 'deskside: the engine key file %s is missing or unreadable\\n' "
        '"$engine_env" >&2',
        "  exit 1",
        "fi",
        "set -a",
        "# shellcheck source=/dev/null",
        '. "$engine_env"',
        "set +a",
        "# no network at start-up: use the cost map bundled with LiteLLM",
        "export LITELLM_LOCAL_MODEL_COST_MAP=True",
        "# the LiteLLM program: the recipe's, or the first argument (the proxy's container",
        "# runs the one in its image)",
        f"litellm={sh(recipe.proxy.litellm)}",
        "if [ $# -gt 0 ]; then litellm=$1; fi",
        'exec "$litellm" --config "$here/config.yaml" '
        f"--host {sh(recipe.head.address)} --port {recipe.proxy.port}",
    ]
    return "\n".join(lines) + "\n"

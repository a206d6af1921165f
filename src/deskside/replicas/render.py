"""render_set: the files of a replica set (pure, byte-reproducible).

    groups/<group>/...          each group's own bundle (`deskside.render.assemble.render`
                                of the group's recipe): its nodes' launch.sh, units, ...
    proxy/config.yaml           LiteLLM: every served name over every group (`proxy`)
    proxy/run-proxy.sh          starts LiteLLM: MASTER_KEY_FILE ENGINES_ENV [LITELLM]

The proxy runs on the first group's head, on this machine's loopback when that head is a
network namespace of this machine (the root namespace reaches every group's bridge).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from deskside.planner.plan import Plan
from deskside.recipe.groups import group_recipes
from deskside.recipe.types import Recipe
from deskside.render.assemble import render
from deskside.render.bundle import MODE_FILE, MODE_SCRIPT, Bundle
from deskside.render.context import printable_name
from deskside.render.quote import sh
from deskside.replicas.proxy import MASTER_KEY_ENV, render_set_config

GROUPS_DIR = "groups"
PROXY_DIR = "proxy"
LOCAL_PROXY_HOST = "127.0.0.1"


def proxy_host(recipe: Recipe) -> str:
    """Where the set's proxy listens: the first group's head, or this machine's loopback
    when that head is a network namespace here."""
    return LOCAL_PROXY_HOST if recipe.head.netns else recipe.head.address


def proxy_url(recipe: Recipe) -> str:
    return f"http://{proxy_host(recipe)}:{recipe.proxy.port}"


def render_run_proxy(recipe: Recipe, recipe_file: str) -> str:
    lines = [
        "#!/bin/sh",
        f"# {recipe.name}: start the LiteLLM proxy in front of every replica group.",
        f"# Rendered by `deskside render` from {recipe_file}.",
        "# Usage: run-proxy.sh MASTER_KEY_FILE ENGINES_ENV_FILE [LITELLM]",
        "# The keys are read from their files here: they are in no rendered file and on no",
        "# command line. ENGINES_ENV_FILE holds every group's engine key.",
        "# shellcheck disable=SC1003,SC2016,SC2088",
        "set -eu",
        "case $0 in */*) here=${0%/*} ;; *) here=. ;; esac",
        "if [ $# -lt 2 ]; then",
        "  echo 'usage: run-proxy.sh MASTER_KEY_FILE ENGINES_ENV_FILE [LITELLM]' >&2",
        "  exit 2",
        "fi",
        "key_file=$1; engines_env=$2",
        'for f in "$key_file" "$engines_env"; do',
        '  if [ ! -r "$f" ]; then',
        "    printf 'deskside: key file %s is missing or unreadable\\n' \"$f\" >&2",
        "    exit 1",
        "  fi",
        "done",
        f'{MASTER_KEY_ENV}=$(cat "$key_file")',
        f"export {MASTER_KEY_ENV}",
        "set -a",
        "# shellcheck source=/dev/null",
        '. "$engines_env"',
        "set +a",
        "# no network at start-up: use the cost map bundled with LiteLLM",
        "export LITELLM_LOCAL_MODEL_COST_MAP=True",
        f"litellm={sh(recipe.proxy.litellm)}",
        "if [ $# -gt 2 ]; then litellm=$3; fi",
        'exec "$litellm" --config "$here/config.yaml" '
        f"--host {sh(proxy_host(recipe))} --port {recipe.proxy.port}",
    ]
    return "\n".join(lines) + "\n"


def proxy_files(
    recipe: Recipe, plans: Mapping[str, Plan], recipe_file: str
) -> dict[str, tuple[str, int]]:
    """The proxy's files: name -> (text, mode)."""
    groups = group_recipes(recipe)
    lengths = {g: plans[g].max_model_len for g in groups}
    return {
        "config.yaml": (render_set_config(recipe, groups, lengths, recipe_file), MODE_FILE),
        "run-proxy.sh": (render_run_proxy(recipe, recipe_file), MODE_SCRIPT),
    }


def render_set(recipe: Recipe, recipe_path: Path, plans: Mapping[str, Plan]) -> Bundle:
    """Every group's bundle under groups/<group>/, then the proxy's files."""
    bundle = Bundle()
    for group, one in group_recipes(recipe).items():
        part = render(one, recipe_path, plans[group])
        for path, data in part.items():
            bundle.add(f"{GROUPS_DIR}/{group}/{path}", data, part.mode(path))
        bundle.notes.extend(f"{group}: {note}" for note in part.notes)
    for name, (text, mode) in proxy_files(recipe, plans, printable_name(recipe_path.name)).items():
        bundle.add(f"{PROXY_DIR}/{name}", text, mode)
    return bundle


__all__ = ["GROUPS_DIR", "PROXY_DIR", "proxy_files", "proxy_host", "proxy_url", "render_set"]

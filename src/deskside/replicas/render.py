"""render_set: the files of a replica set (pure, byte-reproducible).

    groups/<group>/...          each group's own bundle (`deskside.render.assemble.render`
                                of the group's recipe): its nodes' launch.sh, units, ...
    proxy/config.yaml           LiteLLM: every served name over every group (`proxy`)
    proxy/run-proxy.sh          starts LiteLLM: MASTER_KEY_FILE KEYS_FILE LITELLM ARG...
                                (`deskside.render.proxy`; how: `proxy.set_proxy`)

The proxy runs on the first group's head, on this machine's loopback when that head is a
network namespace of this machine (the root namespace reaches every group's bridge).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from deskside.engine.services import PROXY_CONFIG, PROXY_SCRIPT, url
from deskside.planner.plan import Plan
from deskside.recipe.groups import group_recipes
from deskside.recipe.types import Recipe
from deskside.render.bundle import MODE_FILE, MODE_SCRIPT, Bundle
from deskside.render.context import printable_name
from deskside.render.proxy import render_run_proxy
from deskside.replicas.proxy import proxy_host, render_set_config

GROUPS_DIR = "groups"
PROXY_DIR = "proxy"


def proxy_url(recipe: Recipe) -> str:
    return url(proxy_host(recipe), recipe.proxy.port)


def render_set_run_proxy(recipe: Recipe, recipe_file: str) -> str:
    title = f"{recipe.name}: start the LiteLLM proxy in front of every replica group."
    return render_run_proxy(title, recipe_file)


def proxy_files(
    recipe: Recipe, plans: Mapping[str, Plan], recipe_file: str
) -> dict[str, tuple[str, int]]:
    """The proxy's files: name -> (text, mode)."""
    groups = group_recipes(recipe)
    lengths = {g: plans[g].max_model_len for g in groups}
    return {
        PROXY_CONFIG: (render_set_config(recipe, groups, lengths, recipe_file), MODE_FILE),
        PROXY_SCRIPT: (render_set_run_proxy(recipe, recipe_file), MODE_SCRIPT),
    }


def render_set(recipe: Recipe, recipe_path: Path, plans: Mapping[str, Plan]) -> Bundle:
    """Every group's bundle under groups/<group>/, then the proxy's files."""
    from deskside.render.assemble import render  # only a start renders: status stays light

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

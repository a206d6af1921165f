"""Recipes the render tests share: the shipped ones (with the tiny model they plan from)
and a hostile recipe whose free-text values are built to break quoting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from deskside.planner.inputs import plan_recipe
from deskside.planner.plan import Plan
from deskside.recipe.load import load_recipe
from deskside.recipe.types import Recipe
from deskside.render.assemble import render
from deskside.render.bundle import Bundle

ROOT = Path(__file__).parents[2]
ALL_RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
SET_RECIPES = [p for p in ALL_RECIPES if "\nreplicas:" in p.read_text()]
"""Replica sets: each group is a recipe of its own (tests/unit/test_replicas_golden.py)."""
RECIPES = [p for p in ALL_RECIPES if p not in SET_RECIPES]
"""One-engine recipes."""
FLAGSHIP = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"
LOCAL_TINY = ROOT / "recipes" / "local-tiny.yaml"
SYSFS = ROOT / "tests" / "unit" / "fixtures" / "sysfs"


def ensure_tiny_model(folder: Path, arch: str = "deepseek-v3") -> None:
    if not (folder / "config.json").exists():
        from deskside.tiny import write_tiny_model

        write_tiny_model(arch, folder)


def load_recipe_with_model(recipe_path: Path) -> Recipe:
    """The recipe, with the tiny model it serves made at its model.path when missing."""
    from deskside.home import embedded_tiny_models

    recipe = load_recipe(recipe_path)
    if recipe.model.path is not None:
        arch = embedded_tiny_models().get(recipe.name, "deepseek-v3")
        ensure_tiny_model(Path(recipe.model.path), arch)
    return recipe


def load_and_plan(recipe_path: Path) -> tuple[Recipe, Plan]:
    recipe = load_recipe_with_model(recipe_path)
    return recipe, plan_recipe(recipe, recipe_path)


def render_path(recipe_path: Path) -> Bundle:
    recipe, plan = load_and_plan(recipe_path)
    return render(recipe, recipe_path, plan)


# Values that are live in some format: sh ($(), backticks, quotes, newlines, globs,
# tildes), systemd (% specifiers, $ substitution, ;), Compose ($ interpolation), YAML
# (': ', '#', leading '-' and '&'), env files (' #', quotes, backslashes).
NASTY = "a 'b' \"c\" $(touch PWNED) `touch PWNED` ${HOME} $HOME %h %n ; * ~ \\ # d"
NASTY_LINES = "line one\nline 'two' $(touch PWNED)\n\ttab\n"
NASTY_WORD = "x$(touch${IFS}PWNED)`id`'q'\"d\"%h;*~#&"  # no blanks: for NoSpace fields

HOSTILE_ENV = {
    "NASTY": NASTY,
    "NASTY_LINES": NASTY_LINES,
    "EMPTY": "",
    "DOLLARS": "$$ $1 ${X:-y} $(( 1 + 1 ))",
    "SINGLE": "'",
    "BACKSLASH_END": "trailing\\",
    "PLAIN": "plain-value_1.2",
    "EQUALS": "=a=b",
    "TILDE": "~/x:~/y",
}
HOSTILE_ARGS = [
    "--chat-template",
    NASTY,
    "--override-generation-config",
    '{"note": "' + NASTY_WORD + '"}',
    "--tool-call-parser=" + NASTY_LINES,
    "-",
    "--",
    "-x y",
]


def hostile_recipe_data(model_dir: str) -> dict[str, Any]:
    """Two nodes, container runtime, everything on: every free-text field is hostile."""
    digest = "sha256:" + "ab" * 32
    return {
        "version": 1,
        "name": "hostile",
        "description": NASTY_LINES,
        "cluster": {
            "nodes": [
                {
                    "name": "head.0",
                    "address": "10.99.0.1",
                    "role": "head",
                    "hardware": "cpu",
                    "fabric": {"interface": "eth0", "address": "10.99.1.1"},
                },
                {
                    "name": "worker_1",
                    "address": "host-b.example",
                    "role": "worker",
                    "hardware": "cpu",
                    "fabric": {"interface": "eth0", "address": "10.99.1.2"},
                },
            ],
            "fabric": {
                "transport": "socket",
                "nccl_env": {"NCCL_DEBUG": NASTY, "NCCL_DEBUG_SUBSYS": NASTY_LINES},
            },
        },
        "model": {
            "path": model_dir,
            "served_name": "served" + NASTY_WORD,
            "aliases": ["alias'1", 'alias"2', "alias$3"],
        },
        "engine": {
            "vllm_version": "0.32.0",
            "image": "registry.example/img" + "$(touch${IFS}PWNED)`id`" + ":1@" + digest,
            "device": "cpu",
            "tensor_parallel_size": 2,
            "nnodes": 2,
            "kv_cache_memory": "1GiB",
            "max_model_len": 4096,
            "load_format": "dummy",
            "speculative": {"method": "mtp", "num_speculative_tokens": 2},
            "extra_args": HOSTILE_ARGS,
            "env": HOSTILE_ENV,
        },
        "runtime": {
            "kind": "container",
            "root": "/opt/" + NASTY_WORD,
            "hf_cache": "/var/cache/%h$HOME`id`'q'",
            "shm_size": "16g",
            "systemd": True,
        },
        "proxy": {
            "enabled": True,
            "port": 4000,
            "master_key_file": "/etc/" + NASTY_WORD,
            "image": "registry.example/litellm$(touch${IFS}PWNED)`id`:1@" + digest,
        },
        "monitoring": {
            "enabled": True,
            "images": {
                "prometheus": "registry.example/prom${HOME}:1@" + digest,
                "grafana": "registry.example/grafana'q'%h:1@" + digest,
                "node_exporter": "registry.example/ne$$;*~#&:1@" + digest,
            },
        },
        "guard": {"kv_usage_warn": 0.8, "min_spec_acceptance": 0.25},
    }


def write_hostile_recipe(folder: Path, data: dict[str, Any] | None = None) -> Path:
    """The hostile recipe in `folder` (a name with a space in it), with its tiny model."""
    folder.mkdir(parents=True, exist_ok=True)
    model_dir = "models/tiny" + NASTY_WORD.replace("/", "")
    ensure_tiny_model(folder / model_dir)
    path = folder / "hostile recipe.yaml"
    yaml = YAML(typ="safe", pure=True)
    with path.open("w") as fh:
        yaml.dump(data or hostile_recipe_data(model_dir), fh)
    return path


def hostile_bundle(folder: Path) -> tuple[Recipe, Path, Bundle]:
    path = write_hostile_recipe(folder)
    recipe, plan = load_and_plan(path)
    return recipe, path, render(recipe, path, plan)


def dump(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True)

"""Golden files: every shipped recipe's plan and per-node launch (program, argv, env,
probe address, ports) are committed under tests/golden/<recipe>/; this test derives them
again and compares. The rendered launch.sh and node.env of every node are checked against
the same launch golden. `pytest --update-golden` rewrites the goldens after an intended
change (review the diff)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from deskside.engine.launch import Site, launches
from deskside.planner.inputs import plan_recipe
from deskside.render.assemble import render

from .render_cases import RECIPES, ROOT, load_and_plan

GOLDEN = ROOT / "tests" / "golden"


def normalise(text: str) -> str:
    return text.replace(str(ROOT), "<repo>")


def launch_records(recipe_path: Path) -> list[dict[str, Any]]:
    recipe, plan = load_and_plan(recipe_path)
    return [
        {
            "node": la.node,
            "node_rank": la.node_rank,
            "role": la.role,
            "program": list(la.program),
            "args": list(la.args),
            "env": la.env_dict,
            "workdir": la.workdir,
            "probe_url": la.probe_url,
            "ports": list(la.ports),
            "gid_at_launch": la.gid_at_launch,
            "command": la.shell_command(),
        }
        for la in launches(recipe, plan, Site.deployed(recipe, recipe_path))
    ]


def rendered(recipe_path: Path) -> dict[str, str]:
    _, plan = load_and_plan(recipe_path)
    out = {
        "launch.json": json.dumps(launch_records(recipe_path), indent=2) + "\n",
        "plan.json": json.dumps(plan.model_dump(mode="json"), indent=2) + "\n",
    }
    return {name: normalise(text) for name, text in out.items()}


@pytest.mark.parametrize("recipe_path", RECIPES, ids=[p.stem for p in RECIPES])
def test_golden(recipe_path: Path, update_golden: bool) -> None:
    folder = GOLDEN / recipe_path.stem
    files = rendered(recipe_path)
    if update_golden:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (folder / name).write_text(text)
    for name, text in files.items():
        expected = (folder / name).read_text()
        assert text == expected, f"{folder / name} differs; rerun with --update-golden if intended"


def launch_sh_words(script: str) -> tuple[dict[str, str], list[str]]:
    """The exported environment and the exec'd command of a rendered launch.sh, read the
    way sh reads them (the GID resolution block is skipped: it exports one variable)."""
    env: dict[str, str] = {}
    lines = script.splitlines()
    for line in lines:
        if line.startswith("export ") and "=" in line:
            name, _, value = line.removeprefix("export ").partition("=")
            words = shlex.split(value)
            env[name] = words[0] if words else ""
    start = next(i for i, line in enumerate(lines) if line.startswith("exec "))
    command = " ".join(line.rstrip("\\") for line in lines[start:])
    return env, shlex.split(command)[1:]


@pytest.mark.parametrize("recipe_path", RECIPES, ids=[p.stem for p in RECIPES])
def test_rendered_launch_is_the_golden_launch(recipe_path: Path) -> None:
    recipe, plan = load_and_plan(recipe_path)
    bundle = render(recipe, recipe_path, plan)
    golden = json.loads((GOLDEN / recipe_path.stem / "launch.json").read_text())
    assert {g["node"] for g in golden} == {n.name for n in recipe.cluster.nodes}
    for g in golden:
        env, argv = launch_sh_words(bundle[f"{g['node']}/launch.sh"].decode())
        assert argv == [*g["program"], *g["args"]], g["node"]
        assert env == g["env"], g["node"]
        if recipe.runtime.kind == "container":
            # Compose reads node.env: the same values (GID resolved by launch.sh only)
            names = set()
            for line in bundle[f"{g['node']}/node.env"].decode().splitlines():
                if "=" in line and not line.startswith("#"):
                    names.add(line.split("=", 1)[0])
                elif line.startswith("# ") and ": set by launch.sh only" in line:
                    names.add(line[2:].split(":", 1)[0])
            assert names == set(g["env"]), g["node"]


@pytest.mark.parametrize("recipe_path", RECIPES, ids=[p.stem for p in RECIPES])
@pytest.mark.parametrize("length", ["as written", "auto"])
def test_one_length_everywhere(recipe_path: Path, length: str) -> None:
    """`plan --json` max_model_len, every node's launch argv, the LiteLLM config and the
    lock carry one number; with `max_model_len: auto` it is the planned one (never -1)."""
    recipe, _ = load_and_plan(recipe_path)
    engine = recipe.engine
    if length == "auto":
        engine = engine.model_copy(update={"max_model_len": "auto"})
    # the proxy on, so its config is rendered too
    proxy = recipe.proxy.model_copy(update={"enabled": True})
    r = recipe.model_copy(update={"engine": engine, "proxy": proxy})
    plan = plan_recipe(r, recipe_path)
    planned = plan.model_dump(mode="json")["max_model_len"]
    assert isinstance(planned, int) and planned > 0
    for la in launches(r, plan, Site.deployed(r, recipe_path)):
        assert la.args[la.args.index("--max-model-len") + 1] == str(planned), la.node
    bundle = render(r, recipe_path, plan)
    yaml = YAML(typ="safe")
    litellm = yaml.load(bundle["cluster/litellm/config.yaml"].decode())
    limits = {m["model_info"]["max_input_tokens"] for m in litellm["model_list"]}
    assert limits == {planned}
    lock = json.loads(bundle["cluster/deskside.lock"].decode())
    assert lock["plan"]["max_model_len"] == planned
    for node in lock["nodes"].values():
        assert node["argv"][node["argv"].index("--max-model-len") + 1] == str(planned)

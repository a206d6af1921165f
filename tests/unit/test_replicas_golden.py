"""Golden files of the shipped replica sets: per group, the plan and every node's launch;
the set's bundle (each group's bundle and the proxy's files); and the dry-run transcript
of each group's start. `pytest --update-golden` rewrites them (review the diff)."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from deskside.engine.launch import Site, launches
from deskside.recipe.groups import group_recipes
from deskside.replicas.gate import gate_config
from deskside.replicas.place import proxy_place
from deskside.replicas.plans import plan_set
from deskside.replicas.render import render_set

from ..bundles import read_bundle_dir
from .render_cases import ROOT, SET_RECIPES, load_recipe_with_model
from .test_golden import normalise
from .test_transcript_golden import dry_run_recipe, transcript_text

GOLDEN = ROOT / "tests" / "golden"
IDS = [p.stem for p in SET_RECIPES]


def test_the_shipped_sets() -> None:
    assert {p.stem for p in SET_RECIPES} >= {"local-replicas", "quad-spark-replicas"}


def plans_and_launches(recipe_path: Path) -> dict[str, str]:
    recipe = load_recipe_with_model(recipe_path)
    plans = plan_set(recipe, recipe_path)
    launched = {}
    for group, one in group_recipes(recipe).items():
        launched[group] = [
            {
                "node": la.node,
                "node_rank": la.node_rank,
                "role": la.role,
                "args": list(la.args),
                "env": la.env_dict,
                "probe_url": la.probe_url,
                "ports": list(la.ports),
                "secret_env_file": la.secret_env_file,
            }
            for la in launches(one, plans[group], Site.deployed(one, recipe_path))
        ]
    out = {
        "plan.json": json.dumps({g: p.model_dump(mode="json") for g, p in plans.items()}, indent=2),
        "launch.json": json.dumps(launched, indent=2),
    }
    return {name: normalise(text) + "\n" for name, text in out.items()}


@pytest.mark.parametrize("recipe_path", SET_RECIPES, ids=IDS)
def test_set_plan_and_launch_golden(recipe_path: Path, update_golden: bool) -> None:
    folder = GOLDEN / recipe_path.stem
    files = plans_and_launches(recipe_path)
    if update_golden:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (folder / name).write_text(text)
    for name, text in files.items():
        assert text == (folder / name).read_text(), f"{folder / name}: --update-golden?"


@pytest.mark.parametrize("recipe_path", SET_RECIPES, ids=IDS)
def test_set_bundle_golden(recipe_path: Path, update_golden: bool) -> None:
    recipe = load_recipe_with_model(recipe_path)
    bundle = render_set(recipe, recipe_path, plan_set(recipe, recipe_path))
    folder = GOLDEN / recipe_path.stem / "bundle"
    if update_golden:
        shutil.rmtree(folder, ignore_errors=True)
        bundle.write(folder)
    expected = read_bundle_dir(folder)
    assert sorted(bundle) == sorted(expected), f"{folder}: files differ; --update-golden?"
    for path, data in bundle.items():
        assert data == expected[path], f"{folder / path} differs; --update-golden?"
        on_disk = stat.S_IMODE((folder / path).stat().st_mode)
        assert bool(on_disk & 0o111) == bool(bundle.mode(path) & 0o111), path


@pytest.mark.parametrize("recipe_path", SET_RECIPES, ids=IDS)
def test_set_transcript_golden(
    recipe_path: Path, update_golden: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("DESKSIDE_HOME", str(home))
    recipe = load_recipe_with_model(recipe_path)
    plans = plan_set(recipe, recipe_path)
    text = ""
    for group, one in group_recipes(recipe).items():
        report = dry_run_recipe(one, recipe_path, plans[group])
        assert report.ok, (group, report.failed_stage, report.error)
        text += f"# group {group}\n" + transcript_text(report, home)
    golden = GOLDEN / recipe_path.stem / "transcript.txt"
    if update_golden:
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden} differs; rerun with --update-golden"


@pytest.mark.parametrize("recipe_path", SET_RECIPES, ids=IDS)
def test_proxy_routes_every_name_over_every_group(recipe_path: Path) -> None:
    """Checked against the recipe, not the code: every served name and alias has one
    deployment per group, at that group's port of the drain gate (the ports after the
    proxy's, on its host), with that group's key variable; the gate relays each port to
    that group's head; no group runs a proxy of its own, and each group's head requires its
    engine key."""
    recipe = load_recipe_with_model(recipe_path)
    assert recipe.replicas is not None
    bundle = render_set(recipe, recipe_path, plan_set(recipe, recipe_path))
    config = YAML(typ="safe").load(bundle["proxy/config.yaml"].decode())
    heads = {
        g.name: next(
            n.address for n in recipe.cluster.nodes if n.name in g.nodes and n.role == "head"
        )
        for g in recipe.replicas.groups
    }
    front = "127.0.0.1" if recipe.head.netns else recipe.head.address
    wanted = {
        (
            name,
            f"http://{front}:{recipe.proxy.port + 1 + i}/v1",
            f"os.environ/DESKSIDE_ENGINE_KEY_{g.upper()}",
        )
        for name in (recipe.model.served_name, *recipe.model.aliases)
        for i, g in enumerate(heads)
    }
    gate = gate_config(recipe, group_recipes(recipe), proxy_place(recipe))
    assert gate["host"] == front
    assert gate["groups"] == {
        g: {
            "port": recipe.proxy.port + 1 + i,
            "upstream": f"http://{heads[g]}:{recipe.engine.port}",
            "key_env": f"DESKSIDE_ENGINE_KEY_{g.upper()}",
        }
        for i, g in enumerate(heads)
    }
    got = {
        (m["model_name"], m["litellm_params"]["api_base"], m["litellm_params"]["api_key"])
        for m in config["model_list"]
    }
    assert got == wanted
    router = config["router_settings"]
    assert router["routing_strategy"] == recipe.replicas.routing_strategy
    assert router["num_retries"] == recipe.replicas.num_retries
    assert router["cooldown_time"] == recipe.replicas.cooldown_time
    assert not any(p.endswith("litellm/config.yaml") for p in bundle if p.startswith("groups/"))
    for group in recipe.replicas.groups:
        assert f"groups/{group.name}/{group.nodes[0]}/launch.sh" in bundle

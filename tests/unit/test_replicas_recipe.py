"""The `replicas` section: each group becomes a recipe of its own; every rule that ties
the groups to cluster.nodes and engine refuses at the line to fix."""

from __future__ import annotations

import pytest

from deskside.errors import RecipeError
from deskside.recipe.groups import group_names, group_recipes, group_run_name
from deskside.recipe.load import format_recipe_error, load_recipe_text

from .render_cases import ROOT

NODE = (
    "    - {{name: {n}, address: {a}, role: {r}, hardware: cpu, netns: rs-{n},\n"
    "       fabric: {{interface: rs{n}, address: {a}}}}}\n"
)
NODES = "".join(
    NODE.format(n=n, a=a, r=r)
    for n, a, r in (
        ("a0", "10.80.0.1", "head"),
        ("a1", "10.80.0.2", "worker"),
        ("b0", "10.80.1.1", "head"),
        ("b1", "10.80.1.2", "worker"),
    )
)
BASE = (
    """\
version: 1
name: rs
cluster:
  nodes:
"""
    + NODES
    + """\
replicas:
  groups:
    - name: a
      nodes: [a0, a1]
    - name: b
      nodes: [b0, b1]
model: {path: /models/tiny, served_name: tiny}
engine:
  vllm_version: "0.32.0"
  device: cpu
  tensor_parallel_size: 2
  nnodes: 2
  kv_cache_memory: 1GiB
  max_model_len: 1024
  load_format: dummy
proxy: {enabled: true}
runtime: {kind: native}
"""
)


def refused(text: str) -> list[tuple[int | None, str]]:
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text)
    return [
        (p.location.line if p.location else None, format_recipe_error(p))
        for p in info.value.problems
    ]


def test_each_group_is_a_recipe_of_its_own() -> None:
    recipe = load_recipe_text(BASE)
    groups = group_recipes(recipe)
    assert list(groups) == group_names(recipe) == ["a", "b"]
    a, b = groups["a"], groups["b"]
    assert (a.name, b.name) == ("rs-a", "rs-b") == (group_run_name("rs", "a"), "rs-b")
    assert [n.name for n in a.cluster.nodes] == ["a0", "a1"]
    assert [n.name for n in b.cluster.nodes] == ["b0", "b1"]
    assert (a.head.name, b.head.name) == ("a0", "b0")
    for one in (a, b):
        assert one.replicas is None and one.replica_set == "rs"
        # the set's proxy fronts the group: its engine needs its key, it runs no proxy
        assert one.engine_keyed and not one.runs_proxy
    assert recipe.runs_proxy and recipe.replica_set is None
    one_engine = load_recipe_text((ROOT / "recipes" / "local-tiny.yaml").read_text())
    assert group_recipes(one_engine) == {} and group_names(one_engine) == []


B1_HEAD = ("role: worker, hardware: cpu, netns: rs-b1", "role: head, hardware: cpu, netns: rs-b1")
SAME_NET = ("address: 10.80.1.2}", "address: 10.80.0.3}")


@pytest.mark.parametrize(
    ("change", "line", "words"),
    [
        (("nodes: [b0, b1]", "nodes: [b0, a1]"), 18, "is in group 'a' already"),
        (("nodes: [b0, b1]", "nodes: [b0, c9]"), 18, "which cluster.nodes does not have"),
        (B1_HEAD, 18, "has 2 heads"),
        (("nodes: [b0, b1]", "nodes: [b0]"), 18, "engine.nnodes is 2"),
        (("proxy: {enabled: true}", "proxy: {enabled: false}"), 28, "replicas need the proxy"),
        (SAME_NET, 18, "groups on this machine each need their own /24"),
        (("    - name: b\n", "    - name: a\n"), 17, "is used by groups[0] already"),
        (("    - name: b\n", "    - name: B\n"), 17, "should match pattern"),
    ],
)
def test_replica_rules_refuse_at_the_line(change: tuple[str, str], line: int, words: str) -> None:
    text = BASE.replace(*change)
    assert text != BASE
    problems = refused(text)
    assert any(at == line and words in msg for at, msg in problems), problems


def test_a_node_in_no_group_is_named() -> None:
    problems = refused(BASE.replace("nodes: [b0, b1]", "nodes: [b0]"))
    assert any("node 'b1' is in no replica group" in m for _, m in problems), problems
    problems = refused(BASE.replace("    - name: b\n      nodes: [b0, b1]\n", ""))
    assert any("at least 2" in m for _, m in problems), problems


def test_shipped_replica_recipes_load_and_split() -> None:
    for name in ("local-replicas", "quad-spark-replicas"):
        path = ROOT / "recipes" / f"{name}.yaml"
        if not path.exists():
            pytest.fail(f"{path} is missing")
        recipe = load_recipe_text(path.read_text(), str(path))
        groups = group_recipes(recipe)
        assert len(groups) == 2
        nodes = [n.name for one in groups.values() for n in one.cluster.nodes]
        assert sorted(nodes) == sorted(n.name for n in recipe.cluster.nodes)


def test_a_node_finds_its_groups_engine_and_one_engine_commands_refuse_a_set() -> None:
    from deskside.errors import UsageError
    from deskside.recipe.groups import engine_recipe_of, refuse_replica_set

    recipe = load_recipe_text(BASE)
    assert engine_recipe_of(recipe, "b1").name == "rs-b"
    assert engine_recipe_of(recipe, "a0").name == "rs-a"
    # every node but the first head gets the model from it (workers and other heads)
    assert [n.name for n in recipe.workers] == ["a1", "b0", "b1"]
    with pytest.raises(UsageError) as info:
        refuse_replica_set(recipe, "doctor")
    assert "rs-a, rs-b" in (info.value.hint or "")
    one_engine = load_recipe_text((ROOT / "recipes" / "local-tiny.yaml").read_text())
    refuse_replica_set(one_engine, "doctor")  # nothing to refuse
    assert engine_recipe_of(one_engine, "node1") is one_engine

"""Recovery of one replica group restarts that group's engines from the group's recipe:
its two nodes only, the head still behind its engine key (the set's proxy fronts it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskside.operate.restart import _local_spawns
from deskside.records.run import RunNode, RunRecord

from .render_cases import ROOT, load_recipe_with_model

SET_FILE = ROOT / "recipes" / "local-replicas.yaml"


def group_run(name: str, nodes: list[tuple[str, str, str]], home: Path) -> RunRecord:
    return RunRecord(
        recipe=str(SET_FILE),
        recipe_name=name,
        runtime="local",
        control="process",
        runtime_kind="native",
        unit=f"deskside-{name}.service",
        compose_project=f"deskside-{name}",
        api_url="http://10.79.1.1:8888",
        proxy_url=None,  # the set's proxy, not the group's
        served_names=["llama-tiny", "tiny-replicas"],
        started_at="2026-01-01T00:00:00+00:00",
        replica_set="local-replicas",
        engine_keyed=True,
        nodes=[
            RunNode(
                name=n,
                role=role,
                node_rank=i,
                address=address,
                ssh=None,
                netns=None,
                recipe_dir=str(home / "runs" / name / "nodes" / n),
            )
            for i, (n, role, address) in enumerate(nodes)
        ],
    )


def test_a_groups_restart_spawns_its_own_nodes_with_the_engine_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    load_recipe_with_model(SET_FILE)  # the tiny model its plan reads
    run = group_run(
        "local-replicas-b",
        [("rep-b0", "head", "10.79.1.1"), ("rep-b1", "worker", "10.79.1.2")],
        tmp_path,
    )
    spawns, lock = _local_spawns(run, lambda _msg: None)
    assert lock.startswith("launch:")
    assert set(spawns) == {"rep-b0", "rep-b1"}
    head, worker = spawns["rep-b0"], spawns["rep-b1"]
    # the head's engine reads its key from the group's own engine.env, then execs vLLM
    assert str(tmp_path / "secrets" / "local-replicas-b" / "engine.env") in head.argv
    assert "--master-addr" in head.argv and head.argv[head.argv.index("--master-addr") + 1] == (
        "10.79.1.1"
    )
    assert "--headless" in worker.argv and "engine.env" not in " ".join(worker.argv)
    assert dict(head.env)["VLLM_HOST_IP"] == "10.79.1.1"


def test_a_groups_diagnostic_bundle_gets_the_groups_recipe(tmp_path: Path) -> None:
    from deskside.diagnose.bundle import bundle_recipe

    run = group_run(
        "local-replicas-b",
        [("rep-b0", "head", "10.79.1.1"), ("rep-b1", "worker", "10.79.1.2")],
        tmp_path,
    )
    recipe, path, why = bundle_recipe(run)
    assert why is None and path == SET_FILE
    assert recipe is not None and recipe.name == "local-replicas-b"
    assert [n.name for n in recipe.cluster.nodes] == ["rep-b0", "rep-b1"]
    other = run.model_copy(update={"recipe_name": "local-replicas-z"})
    assert bundle_recipe(other)[2] == (
        f"{SET_FILE} is now recipe 'local-replicas', not 'local-replicas-z'"
    )

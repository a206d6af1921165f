"""deskside.lock: what it pins, that it hashes every other file, that it holds no secret,
and `diff` per host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deskside.errors import UsageError
from deskside.layout import model_upload
from deskside.recipe.types import Recipe
from deskside.render.assemble import render
from deskside.render.bundle import sha256_hex
from deskside.render.lock import LOCK_PATH, bundle_lock, diff, parse_lock, read_lock

from .render_cases import FLAGSHIP, LOCAL_TINY, load_and_plan


def flagship(**engine: object) -> tuple[Recipe, object]:
    recipe, plan = load_and_plan(FLAGSHIP)
    if engine:
        recipe = recipe.model_copy(update={"engine": recipe.engine.model_copy(update=engine)})
    return recipe, plan


def test_lock_pins_and_hashes_everything() -> None:
    recipe, plan = load_and_plan(FLAGSHIP)
    bundle = render(recipe, FLAGSHIP, plan)
    lock = bundle_lock(bundle)
    assert lock.image == recipe.engine.image
    assert lock.image_digest == "sha256:" + "0" * 64
    assert lock.model.revision == "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
    assert lock.vllm_version == recipe.engine.vllm_version
    assert lock.deskside_version
    hashed = {**lock.cluster_files}
    for node in lock.nodes.values():
        hashed.update(node.files)
    assert set(hashed) == set(bundle) - {LOCK_PATH}
    for path, digest in hashed.items():
        assert digest == sha256_hex(bundle[path])
    head = lock.nodes["ai1"]
    assert head.role == "head" and head.node_rank == 0
    assert head.gid_index == "resolved from sysfs by launch.sh at every start"
    assert head.argv[:2] == ["vllm", "serve"]
    assert head.env["NCCL_NET"] == "IB"
    assert lock.services["proxy"]["master_key_file"].endswith("/secrets/proxy-master-key")
    # the lock is stable JSON with sorted keys
    text = bundle[LOCK_PATH].decode()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


def test_lock_never_holds_the_master_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deskside.secrets import proxy_master_key

    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    key = proxy_master_key("dual-spark-deepseek-v4-flash").reveal()
    recipe, plan = load_and_plan(FLAGSHIP)
    bundle = render(recipe, FLAGSHIP, plan)
    for data in bundle.values():
        assert key.encode() not in data


def test_diff_against_itself_changes_nothing() -> None:
    recipe, plan = load_and_plan(FLAGSHIP)
    bundle = render(recipe, FLAGSHIP, plan)
    result = diff(bundle_lock(bundle), bundle)
    assert [h.host for h in result] == ["ai1", "ai2"]
    assert not any(h.changes_anything for h in result)
    assert not any(h.restart_engine for h in result)
    assert result[0].unchanged == len(bundle_lock(bundle).host_files("ai1"))


def test_diff_of_an_engine_change_restarts_every_node() -> None:
    recipe, plan = load_and_plan(FLAGSHIP)
    old = bundle_lock(render(recipe, FLAGSHIP, plan))
    changed = recipe.model_copy(
        update={"engine": recipe.engine.model_copy(update={"max_num_seqs": 4})}
    )
    result = {h.host: h for h in diff(old, render(changed, FLAGSHIP, plan))}
    for host in ("ai1", "ai2"):
        assert result[host].restart_engine
        assert f"{host}/launch.sh" in result[host].changed
        assert f"{host}/compose.yaml" in result[host].changed  # the launch hash label
        assert "engine arguments changed" in result[host].values
    # no cluster service's configuration moved; the exporters re-read the recipe
    assert result["ai1"].reload == ["exporter"]


def test_diff_of_a_monitoring_change_reloads_prometheus_and_the_exporters_only() -> None:
    recipe, plan = load_and_plan(FLAGSHIP)
    old = bundle_lock(render(recipe, FLAGSHIP, plan))
    changed = recipe.model_copy(
        update={"guard": recipe.guard.model_copy(update={"kv_usage_warn": 0.8})}
    )
    result = {h.host: h for h in diff(old, render(changed, FLAGSHIP, plan))}
    # the rules and the dashboard on the head; the recipe each node's exporter reads
    assert result["ai1"].reload == ["exporter", "grafana", "prometheus"]
    assert not result["ai1"].restart_engine
    assert result["ai2"].changed == ["ai2/recipe.yaml"]
    assert result["ai2"].reload == ["exporter"] and not result["ai2"].restart_engine


def test_diff_image_change_and_first_deployment() -> None:
    recipe, plan = load_and_plan(FLAGSHIP)
    new_image = recipe.engine.image.rsplit("@", 1)[0] + "@sha256:" + "1" * 64  # type: ignore[union-attr]
    changed = recipe.model_copy(
        update={"engine": recipe.engine.model_copy(update={"image": new_image})}
    )
    old = bundle_lock(render(recipe, FLAGSHIP, plan))
    result = diff(old, render(changed, FLAGSHIP, plan))
    assert any(v.startswith("image: ") for v in result[0].values)
    first = diff(None, render(recipe, FLAGSHIP, plan))
    assert all(h.values == ["first deployment"] and h.restart_engine for h in first)
    assert not first[0].changed and first[0].added


def test_diff_names_a_dropped_host(tmp_path: Path) -> None:
    recipe, plan = load_and_plan(LOCAL_TINY)
    old = bundle_lock(render(recipe, LOCAL_TINY, plan))
    renamed = recipe.model_copy(
        update={
            "cluster": recipe.cluster.model_copy(
                update={
                    "nodes": [
                        recipe.cluster.nodes[0],
                        recipe.cluster.nodes[1].model_copy(update={"name": "node2"}),
                    ]
                }
            )
        }
    )
    result = {h.host: h for h in diff(old, render(renamed, LOCAL_TINY, plan))}
    assert result["node1"].values == ["removed"] and result["node1"].removed
    assert result["node1"].restart_engine
    assert result["node2"].added


def test_read_lock_from_a_bundle_folder_and_bad_locks(tmp_path: Path) -> None:
    recipe, plan = load_and_plan(LOCAL_TINY)
    bundle = render(recipe, LOCAL_TINY, plan)
    bundle.write(tmp_path / "b")
    assert read_lock(tmp_path / "b") == bundle_lock(bundle)
    with pytest.raises(UsageError, match="not a deskside lock"):
        parse_lock("{}")
    with pytest.raises(UsageError, match="not a deskside lock"):
        parse_lock("nope")
    with pytest.raises(UsageError, match="no such lock"):
        read_lock(tmp_path / "missing.lock")


def test_local_model_folder_is_uploaded_to_the_models_dir() -> None:
    recipe, _ = load_and_plan(LOCAL_TINY)
    upload = model_upload(recipe, LOCAL_TINY)
    assert upload is not None
    local, remote = upload
    assert local == LOCAL_TINY.parent / "models" / "tiny-deepseek-v3"
    assert remote == "/opt/deskside/local-tiny/models/tiny-deepseek-v3"
    recipe, _ = load_and_plan(FLAGSHIP)
    assert model_upload(recipe, FLAGSHIP) is None

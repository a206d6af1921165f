"""Loading recipes: the shipped recipes, path resolution, errors, schema export, byte sizes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from ruamel.yaml import YAML

from deskside.errors import RecipeError
from deskside.hardware import PROFILES
from deskside.recipe.load import (
    format_recipe_error,
    load_recipe,
    load_recipe_text,
    resolve_path,
)
from deskside.recipe.schema import recipe_json_schema
from deskside.recipe.types import Recipe
from deskside.units import GIB, format_bytes, format_gib, parse_bytes

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
LOCAL = RECIPES / "local-tiny.yaml"
FLAGSHIP = RECIPES / "dual-spark-deepseek-v4-flash.yaml"

MINIMAL = """\
version: 1
name: minimal
cluster:
  nodes:
    - {name: a, address: 10.0.0.1, role: head, hardware: cpu}
model:
  path: models/tiny
  config: configs/tiny.json
  served_name: tiny
engine:
  vllm_version: "0.32.0"
  device: cpu
  kv_cache_memory: 512 MiB
runtime:
  kind: native
"""


# --------------------------------------------------------------------------- shipped recipes


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_recipe_loads(path: Path) -> None:
    recipe = load_recipe(path)
    assert isinstance(recipe, Recipe)
    assert recipe.name == path.stem


def test_local_tiny() -> None:
    recipe = load_recipe(LOCAL)
    assert [n.name for n in recipe.cluster.nodes] == ["node0", "node1"]
    assert recipe.head.name == "node0"
    assert recipe.head.address == "10.77.0.1"
    assert [w.name for w in recipe.workers] == ["node1"]
    assert {n.hardware for n in recipe.cluster.nodes} == {"cpu"}
    assert [n.fabric.interface for n in recipe.cluster.nodes if n.fabric] == [
        "ds-veth0",
        "ds-veth1",
    ]
    assert recipe.cluster.fabric.transport == "socket"
    assert recipe.model.served_name == "deepseek-v4-flash-tiny"
    assert recipe.model.all_names == ["deepseek-v4-flash-tiny", "tiny"]
    engine = recipe.engine
    assert engine.device == "cpu"
    assert (engine.tensor_parallel_size, engine.nnodes) == (2, 2)
    assert engine.kv_cache_memory == GIB
    assert engine.gpu_memory_utilization is None
    assert engine.max_model_len == 4096
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (6, 4096)
    assert engine.speculative is not None
    assert (engine.speculative.method, engine.speculative.num_speculative_tokens) == ("mtp", 3)
    assert engine.load_format == "dummy"
    assert engine.enforce_eager is True
    assert engine.vllm_version == "0.32.0"
    assert engine.port == 8888
    assert recipe.runtime.kind == "native"
    # model.path is relative to the recipe file, stored resolved
    assert recipe.model.path == str(RECIPES / "models" / "tiny-deepseek-v3")


def test_flagship_encodes_the_seed() -> None:
    recipe = load_recipe(FLAGSHIP)
    ai1, ai2 = recipe.cluster.nodes
    assert (ai1.name, ai1.address, ai1.role) == ("ai1", "192.168.0.27", "head")
    assert (ai2.name, ai2.address, ai2.role) == ("ai2", "192.168.0.176", "worker")
    assert recipe.head is ai1 and recipe.workers == [ai2]
    for node in (ai1, ai2):
        assert node.hardware == "gb10" and node.gpus == 1
        assert node.fabric is not None
        assert node.fabric.hcas == ["rocep1s0f0"]
    assert str(ai1.fabric.address if ai1.fabric else "") == "192.168.100.1"
    fabric = recipe.cluster.fabric
    assert (fabric.transport, fabric.mtu, fabric.master_port) == ("roce", 9000, 25000)
    assert "NCCL_IB_GID_INDEX" not in fabric.nccl_env  # resolved per node at launch (seed #5)
    assert fabric.nccl_env["NCCL_IB_ROCE_VERSION_NUM"] == "2"

    model = recipe.model
    assert model.repo == "deepseek-ai/DeepSeek-V4-Flash-0731"
    assert model.revision == "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
    assert model.all_names == ["deepseek-v4-flash", "deepseek-v4-flash-0731"]
    assert model.config == str(RECIPES / "dual-spark-deepseek-v4-flash" / "config.json")

    engine = recipe.engine
    assert engine.vllm_version == "0.25.2.dev0+g752a3a504.d20260714-tp2-bcc19323"
    assert engine.image is not None
    assert engine.image.startswith("ghcr.io/anemll/dspark-vllm-gx10:0.1.1@sha256:")
    assert (engine.tensor_parallel_size, engine.pipeline_parallel_size, engine.nnodes) == (2, 1, 2)
    assert engine.port == 8888
    assert engine.kv_cache_dtype == "nvfp4_ds_mla"
    assert engine.block_size == 256
    assert engine.max_model_len == 204800
    assert engine.max_num_batched_tokens == 16384
    assert engine.max_num_seqs == 6
    assert engine.gpu_memory_utilization == 0.82
    assert engine.kv_cache_memory is None
    assert engine.speculative is not None
    assert engine.speculative.method == "dspark"
    assert engine.speculative.num_speculative_tokens == 5
    assert engine.speculative.draft_sample_method == "probabilistic"
    assert engine.enable_prefix_caching and engine.enable_chunked_prefill
    assert engine.async_scheduling and engine.enforce_eager
    assert engine.distributed_executor_backend == "mp"
    assert engine.env["VLLM_USE_BREAKABLE_CUDAGRAPH"] == "0"
    assert engine.env["DSPARK_SUPPRESS_STOPS_IN_REASONING"] == "1"
    assert engine.env["DEFAULT_THINKING"] == "max"
    assert engine.env["VLLM_CACHE_ROOT"].startswith(recipe.runtime.hf_cache)
    for flag in ("--tokenizer-mode", "--tool-call-parser", "--reasoning-parser"):
        assert engine.extra_args[engine.extra_args.index(flag) + 1] == "deepseek_v4"
    assert "--enable-auto-tool-choice" in engine.extra_args
    assert "--enable-prompt-tokens-details" in engine.extra_args
    assert recipe.runtime.kind == "container" and recipe.runtime.systemd
    assert recipe.proxy.enabled and recipe.proxy.kind == "litellm" and recipe.proxy.port == 4000
    assert recipe.monitoring.enabled


def test_recipes_are_frozen() -> None:
    recipe = load_recipe(LOCAL)
    with pytest.raises(ValidationError):
        recipe.engine.port = 1  # type: ignore[misc]


def test_defaults_of_a_minimal_recipe() -> None:
    recipe = load_recipe_text(MINIMAL)
    assert recipe.version == 1
    assert recipe.description == ""
    assert recipe.cluster.fabric.transport == "socket"
    assert recipe.cluster.fabric.master_port == 25000
    assert recipe.engine.port == 8000
    assert recipe.engine.max_model_len == "auto"
    assert recipe.engine.kv_cache_dtype == "auto"
    assert recipe.engine.enable_prefix_caching is True
    assert recipe.engine.kv_cache_memory == 512 * 1024**2
    assert recipe.runtime.root == "/opt/deskside"
    assert recipe.proxy.enabled is False and recipe.monitoring.enabled is False
    assert recipe.guard.min_headroom is None and recipe.guard.kv_usage_warn == 0.9
    assert recipe.workers == []
    assert recipe.model.all_names == ["tiny"]


# --------------------------------------------------------------------------- paths


def test_relative_paths_resolve_against_the_recipe_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "recipes"
    folder.mkdir()
    recipe_file = folder / "minimal.yaml"
    recipe_file.write_text(MINIMAL, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for given in (recipe_file, Path("recipes/minimal.yaml"), "recipes/minimal.yaml"):
        recipe = load_recipe(given)
        assert recipe.model.path == str(folder / "models" / "tiny")
        assert recipe.model.config == str(folder / "configs" / "tiny.json")


def test_absolute_and_home_paths_are_kept(tmp_path: Path) -> None:
    text = MINIMAL.replace("path: models/tiny", "path: /srv/models/tiny").replace(
        "config: configs/tiny.json", "config: ~/configs/tiny.json"
    )
    recipe = load_recipe_text(text, str(tmp_path / "r.yaml"))
    assert recipe.model.path == "/srv/models/tiny"
    assert recipe.model.config == "~/configs/tiny.json"


def test_text_without_a_file_keeps_relative_paths(tmp_path: Path) -> None:
    assert load_recipe_text(MINIMAL).model.path == "models/tiny"
    resolved = load_recipe_text(MINIMAL, base_dir=tmp_path).model.path
    assert resolved == str(tmp_path / "models" / "tiny")
    named = load_recipe_text(MINIMAL, str(tmp_path / "x.yaml")).model.path
    assert named == str(tmp_path / "models" / "tiny")


def test_resolve_path_helper(tmp_path: Path) -> None:
    assert resolve_path(tmp_path / "r.yaml", "../m") == str(tmp_path.parent / "m")
    assert resolve_path(tmp_path / "r.yaml", "/abs") == "/abs"
    assert resolve_path(tmp_path / "r.yaml", "~/m") == "~/m"
    assert os.path.isabs(resolve_path("r.yaml", "m"))


# --------------------------------------------------------------------------- errors


def test_several_problems_are_reported_together() -> None:
    text = (
        MINIMAL.replace("  served_name: tiny\n", "  served_name: tiny\n  colour: blue\n")
        .replace("kv_cache_memory: 512 MiB", "kv_cache_memory: lots")
        .replace("name: minimal", "name: Minimal")
    )
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, "recipes/m.yaml")
    err = info.value
    assert err.exit_code == 2
    assert len(err.problems) == 3
    lines = [p.location.line for p in err.problems if p.location]
    assert lines == sorted(lines) == [2, 10, 14]
    assert "3 problems" in err.message
    assert err.location == err.problems[0].location
    shown = format_recipe_error(err)
    assert shown.splitlines()[0] == "recipes/m.yaml: 3 problems"
    assert "recipes/m.yaml:10:3: model.colour: unknown key" in shown
    assert shown.count("  hint: ") == 3


def test_format_matches_the_documented_shape() -> None:
    text = MINIMAL.replace(
        '  vllm_version: "0.32.0"\n', '  vllm_version: "0.32.0"\n  max_model_lenn: 5\n'
    )
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, "recipes/x.yaml")
    assert format_recipe_error(info.value) == (
        "recipes/x.yaml:12:3: engine.max_model_lenn: unknown key\n"
        "  hint: did you mean 'max_model_len'?"
    )
    problem = info.value.problems[0]
    assert problem.location is not None
    assert (problem.location.line, problem.location.column) == (12, 3)
    assert problem.location.field == "engine.max_model_lenn"
    assert problem.to_dict()["location"] == {
        "path": "recipes/x.yaml",
        "line": 12,
        "column": 3,
        "field": "engine.max_model_lenn",
    }


def test_format_accepts_errors_built_elsewhere() -> None:
    err = RecipeError("something is off", hint="do this")
    assert format_recipe_error(err) == "something is off\n  hint: do this"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe(tmp_path / "nope.yaml")
    assert "cannot read the recipe" in info.value.message
    assert info.value.location is not None
    assert info.value.location.path.endswith("nope.yaml")


def test_a_folder_is_not_a_recipe(tmp_path: Path) -> None:
    with pytest.raises(RecipeError):
        load_recipe(tmp_path)


def test_non_utf8_file_is_located(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(MINIMAL.encode() + b"description: caf\xe9\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert info.value.location is not None
    assert info.value.location.line == MINIMAL.count("\n") + 1
    assert "not UTF-8" in info.value.message


def test_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + MINIMAL.encode())
    assert load_recipe(path).name == "minimal"


def test_python_api_enforces_the_same_rules() -> None:
    data: dict[str, Any] = YAML(typ="safe").load(MINIMAL)
    data["engine"]["nnodes"] = 2
    with pytest.raises(ValidationError, match=r"engine\.nnodes is 2"):
        Recipe.model_validate(data)


# --------------------------------------------------------------------------- schema


def test_schema_is_json_with_descriptions() -> None:
    schema = recipe_json_schema()
    text = json.dumps(schema)
    assert json.loads(text) == schema
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["title"] == "deskside recipe"
    assert schema["additionalProperties"] is False
    assert {"name", "cluster", "model", "engine"} <= set(schema["required"])
    engine = schema["$defs"]["Engine"]["properties"]
    assert "Longest context" in engine["max_model_len"]["description"]
    assert engine["kv_cache_memory"]["description"]
    # every field of every model is documented for editors
    for name, definition in [("Recipe", schema), *schema["$defs"].items()]:
        if "properties" not in definition:
            continue
        assert definition.get("additionalProperties") is False, name
        for field, spec in definition["properties"].items():
            assert spec.get("description"), f"{name}.{field} has no description"
    hardware = schema["$defs"]["Node"]["properties"]["hardware"]["description"]
    assert all(profile in hardware for profile in PROFILES)


@pytest.mark.parametrize("path", [LOCAL, FLAGSHIP], ids=lambda p: p.stem)
def test_shipped_recipes_validate_against_the_schema(path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    jsonschema.validate(data, recipe_json_schema())


# --------------------------------------------------------------------------- units


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (4096, 4096),
        (0, 0),
        ("4096", 4096),
        ("4096B", 4096),
        ("1GiB", GIB),
        ("1gib", GIB),
        ("1Gi", GIB),
        ("512 MiB", 512 * 1024**2),
        ("1.5GiB", 3 * GIB // 2),
        ("2GB", 2_000_000_000),
        ("2G", 2_000_000_000),
        ("2gb", 2_000_000_000),
        ("1KiB", 1024),
        ("1kb", 1000),
        ("3TiB", 3 * 1024**4),
        ("1TB", 10**12),
        (" 7 MB ", 7_000_000),
        (".5KiB", 512),
        ("0.3GiB", 322122547),
    ],
)
def test_parse_bytes(text: int | str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    "bad", ["", "GiB", "1 gigabyte", "-1GiB", -5, "1.5", "1.5B", "1e9", "1 GiB B", True, 1.5, None]
)
def test_parse_bytes_refuses(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"byte size|negative|whole number"):
        parse_bytes(bad)


def test_format_gib_and_bytes() -> None:
    assert format_gib(int(10.91 * GIB)) == "10.91 GiB"
    assert format_gib(0) == "0.00 GiB"
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(3 * GIB // 2) == "1.50 GiB"
    assert format_bytes(2 * 1024**4) == "2.00 TiB"
    assert format_bytes(-GIB) == "-1.00 GiB"

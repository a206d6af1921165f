"""`deskside plan` and friends through the real console entry point."""

from __future__ import annotations

import json
from pathlib import Path

from deskside.tiny import write_tiny_model

from ..cli_process import deskside

ROOT = Path(__file__).parents[2]
REQUIRED = {
    "kv_bytes_per_token",
    "block_size",
    "num_blocks",
    "kv_cache_tokens",
    "max_concurrency",
    "max_model_len",
    "fits",
    "estimated_max_model_len",
    "weights_bytes",
    "warnings",
}


def test_model_dir_json_has_per_rank_keys(tmp_path: Path) -> None:
    model = write_tiny_model("llama", tmp_path / "m")
    r = deskside(
        "plan",
        "--model-dir",
        str(model),
        "--device",
        "cpu",
        "--kv-cache-memory",
        "1GiB",
        "--max-model-len",
        "4096",
        "--tp",
        "2",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) >= REQUIRED
    assert len(data["ranks"]) == 2
    for rank in data["ranks"]:
        assert set(rank) >= REQUIRED
    # 4 layers x 1 KV head per rank x (64 + 64) x 2 B = 1,024 B/token -> 1 GiB = 1,048,576
    assert data["kv_bytes_per_token"] == 1024
    assert data["kv_cache_tokens"] == 1_048_576


def test_recipe_flags_override_and_refusal_exit_code() -> None:
    r = deskside(
        "plan", "recipes/dual-spark-deepseek-v4-flash.yaml", "--max-model-len", "1048576", "--json"
    )
    assert r.returncode == 3
    data = json.loads(r.stdout)
    assert data["fits"] is False
    assert data["max_model_len"] == 1_048_576
    assert data["estimated_max_model_len"] and data["estimated_max_model_len"] < 1_048_576


def test_bad_recipe_is_located_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = (ROOT / "recipes" / "local-tiny.yaml").read_text()
    bad.write_text(text.replace("max_model_len:", "max_model_lenn:"))
    r = deskside("plan", str(bad))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr + r.stdout
    assert "bad.yaml:" in r.stderr and "max_model_len" in r.stderr


def test_bad_flag_value_is_a_usage_error() -> None:
    r = deskside("plan", "--model-dir", "/nonexistent", "--max-model-len", "lots")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_schema_is_json_schema() -> None:
    r = deskside("schema")
    assert r.returncode == 0
    schema = json.loads(r.stdout)
    assert "properties" in schema and "engine" in schema["properties"]

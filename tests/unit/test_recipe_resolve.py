"""One resolver for every command that takes a recipe (`deskside.home.resolve_recipe`), and
the embedded recipes' tiny models made on first use, atomically."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from deskside import tiny
from deskside.errors import DesksideError, UsageError
from deskside.home import (
    embedded_recipes,
    embedded_tiny_models,
    ensure_embedded_model,
    resolve_recipe,
)
from deskside.recipe.load import load_recipe_text
from deskside.tiny import ARCHS, MODEL_FILES, ensure_tiny_model, write_tiny_model

ROOT = Path(__file__).parents[2]


def deskside(home: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deskside.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "DESKSIDE_HOME": str(home)},
        timeout=300,
    )


def test_plan_embedded_recipe_on_a_fresh_home_makes_the_model_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    model = home / "models" / "tiny-deepseek-v3"
    first = deskside(home, "plan", "local-tiny", "--json")
    assert first.returncode == 0, first.stderr
    plan = json.loads(first.stdout)
    assert plan["fits"] is True
    assert plan["kv_cache_tokens"] > 0
    assert sorted(p.name for p in model.iterdir()) == sorted(MODEL_FILES)
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["DeepseekV3ForCausalLM"]
    made = {p.name: p.stat().st_ino for p in model.iterdir()}

    again = deskside(home, "plan", "local-tiny", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == plan
    assert {p.name: p.stat().st_ino for p in model.iterdir()} == made  # not made twice
    assert sorted(p.name for p in model.parent.iterdir()) == ["tiny-deepseek-v3"]  # no temp


def test_render_embedded_recipe_on_a_fresh_home(tmp_path: Path) -> None:
    home, out = tmp_path / "home", tmp_path / "bundle"
    r = deskside(home, "render", "local-tiny", "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert (out / "node0" / "launch.sh").is_file()
    assert (home / "models" / "tiny-deepseek-v3" / "config.json").is_file()


def test_validate_and_fabric_take_an_embedded_name_without_making_a_model(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    r = deskside(home, "validate", "local-tiny", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"ok": True, "name": "local-tiny", "nodes": ["node0", "node1"]}
    assert not (home / "models").exists()


def test_a_recipe_file_and_the_embedded_name_resolve_the_same_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("DESKSIDE_HOME", str(home))
    home.mkdir()
    copy = home / "local-tiny.yaml"
    copy.write_text(embedded_recipes()["local-tiny"])
    by_file = resolve_recipe(copy)
    by_name = resolve_recipe("local-tiny")
    assert by_file == by_name
    assert by_name[1] == home / "local-tiny.yaml"
    assert by_name[0].model.path == str(home / "models" / "tiny-deepseek-v3")
    # the shipped example file is the embedded recipe, its paths resolved beside it
    shipped = resolve_recipe(ROOT / "recipes" / "local-tiny.yaml")[0]
    assert shipped.model.path == str(ROOT / "recipes" / "models" / "tiny-deepseek-v3")
    assert shipped.model_copy(update={"model": by_name[0].model}) == by_name[0]


def test_a_file_named_like_an_embedded_recipe_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    text = embedded_recipes()["local-tiny"].replace("name: local-tiny", "name: mine")
    (tmp_path / "local-tiny").write_text(text)
    recipe, path = resolve_recipe("local-tiny")
    assert (recipe.name, path) == ("mine", Path("local-tiny"))


@pytest.mark.parametrize(
    "command",
    [
        ["plan", "RECIPE"],
        ["validate", "RECIPE"],
        ["render", "RECIPE", "--out", "OUT"],
        ["diff", "RECIPE"],
        ["fabric", "show", "RECIPE"],
        ["fabric", "check", "RECIPE"],
    ],
    ids=lambda c: " ".join(a for a in c[:2] if a != "RECIPE"),
)
def test_an_unknown_recipe_is_a_located_usage_error(tmp_path: Path, command: list[str]) -> None:
    home = tmp_path / "home"
    args = [{"RECIPE": "local-tiy", "OUT": str(tmp_path / "out")}.get(a, a) for a in command]
    r = deskside(home, *args, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert f"{tmp_path / 'local-tiy'}: no such recipe file" in r.stderr
    assert "no embedded recipe is named 'local-tiy'" in r.stderr
    assert "Did you mean the embedded recipe 'local-tiny'?" in r.stderr
    assert not (home / "models").exists()


def test_unknown_recipe_error_in_json_carries_its_location(tmp_path: Path) -> None:
    r = deskside(tmp_path / "home", "plan", "nope.yaml", "--json", cwd=tmp_path)
    assert r.returncode == 2
    error = json.loads(r.stdout)
    assert error["error"] == "UsageError"
    assert error["location"]["path"] == str(tmp_path / "nope.yaml")
    assert "local-tiny" in error["hint"]


def test_unknown_recipe_hints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("version: 1\n")
    with pytest.raises(UsageError) as missing_suffix:
        resolve_recipe("mine")
    assert missing_suffix.value.hint is not None
    assert "Did you mean the file mine.yaml?" in missing_suffix.value.hint
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "a.yaml").write_text("version: 1\n")
    with pytest.raises(UsageError) as folder:
        resolve_recipe("recipes")
    assert folder.value.message == "recipes is a folder, not a recipe file"
    assert folder.value.hint == "give one of its recipes: a.yaml"
    assert folder.value.exit_code == 2


def test_every_tiny_model_entry_names_an_embedded_recipe_and_a_known_arch() -> None:
    models = embedded_tiny_models()
    recipes = embedded_recipes()
    assert models == {"local-tiny": "deepseek-v3", "local-replicas": "llama"}
    assert set(models) <= set(recipes)
    assert set(models.values()) <= set(ARCHS)
    # every embedded recipe that serves a local folder with random weights declares its model
    for name, text in recipes.items():
        recipe = load_recipe_text(text, f"<{name}>")
        if recipe.model.path is not None and recipe.engine.load_format == "dummy":
            assert name in models, name


def test_ensure_embedded_model_only_for_declared_recipes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    recipe, _ = resolve_recipe("local-tiny", make_model=False)
    assert not (tmp_path / "models").exists()
    assert ensure_embedded_model("local-tiny", recipe) is True
    assert ensure_embedded_model("local-tiny", recipe) is False
    assert ensure_embedded_model("not-embedded", recipe) is False


def test_model_files_are_what_write_tiny_model_writes(tmp_path: Path) -> None:
    written = write_tiny_model("llama", tmp_path / "m")
    assert sorted(p.name for p in written.iterdir()) == sorted(MODEL_FILES)


def test_ensure_tiny_model_writes_a_whole_model_private_folder(tmp_path: Path) -> None:
    out = tmp_path / "models" / "m"
    assert ensure_tiny_model("qwen3", out) is True
    assert sorted(p.name for p in out.iterdir()) == sorted(MODEL_FILES)
    assert out.stat().st_mode & 0o777 == 0o700
    reference = write_tiny_model("qwen3", tmp_path / "reference")
    for name in MODEL_FILES:
        assert (out / name).read_bytes() == (reference / name).read_bytes()
    assert ensure_tiny_model("qwen3", out) is False
    assert sorted(p.name for p in out.parent.iterdir()) == ["m"]


def test_ensure_tiny_model_concurrent_callers_make_it_once(tmp_path: Path) -> None:
    out = tmp_path / "m"
    results: list[bool] = []
    barrier = threading.Barrier(4)

    def make() -> None:
        barrier.wait()
        results.append(ensure_tiny_model("deepseek-v3", out))

    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1 and len(results) == 4
    assert sorted(p.name for p in out.iterdir()) == sorted(MODEL_FILES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_ensure_tiny_model_loser_of_the_race_discards_its_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "m"
    real = tiny.write_tiny_model

    def slow_writer(arch: str, folder: Path) -> Path:
        written = real(arch, folder)
        real(arch, out)  # another process finishes first, while this one writes
        return written

    monkeypatch.setattr(tiny, "write_tiny_model", slow_writer)
    assert ensure_tiny_model("llama", out) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_ensure_tiny_model_leaves_a_partial_folder_alone(tmp_path: Path) -> None:
    out = tmp_path / "m"
    out.mkdir()
    (out / "config.json").write_text("{}")
    with pytest.raises(DesksideError) as exc:
        ensure_tiny_model("llama", out)
    assert "not a whole tiny model" in exc.value.message
    assert "tokenizer.json" in exc.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
    assert [p.name for p in out.iterdir()] == ["config.json"]


def test_ensure_tiny_model_rejects_an_unknown_arch(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown arch"):
        ensure_tiny_model("gpt-17", tmp_path / "m")
    assert list(tmp_path.iterdir()) == []

"""`deskside render` and `deskside diff` through the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deskside.cli.app import app

from ..bundles import read_bundle_dir
from .render_cases import FLAGSHIP, LOCAL_TINY, ROOT, ensure_tiny_model

runner = CliRunner()


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    ensure_tiny_model(ROOT / "recipes" / "models" / "tiny-deepseek-v3")
    return tmp_path / "home"


def test_render_writes_the_golden_bundle(tmp_path: Path, home: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["render", str(FLAGSHIP), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["recipe"] == "dual-spark-deepseek-v4-flash"
    golden = read_bundle_dir(ROOT / "tests" / "golden" / FLAGSHIP.stem / "bundle")
    assert read_bundle_dir(out) == golden
    assert {f["path"] for f in data["files"]} == set(golden)
    assert next(f for f in data["files"] if f["path"] == "ai1/launch.sh")["mode"] == "0755"
    # the proxy key was generated next to deskside's state, and is not printed
    key_file = Path(data["proxy_master_key_file"])
    assert key_file.is_relative_to(home) and (key_file.stat().st_mode & 0o777) == 0o600
    assert key_file.read_text().strip() not in result.output


def test_render_human_output(tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", str(LOCAL_TINY), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "node0/launch.sh" in result.output and "cluster/deskside.lock" in result.output


def test_render_refuses_a_plan_that_does_not_fit(tmp_path: Path) -> None:
    shutil.copytree(FLAGSHIP.parent / FLAGSHIP.stem, tmp_path / FLAGSHIP.stem)
    recipe = tmp_path / "too-long.yaml"
    recipe.write_text(
        FLAGSHIP.read_text().replace("max_model_len: 204800", "max_model_len: 1048576")
    )
    result = runner.invoke(app, ["render", str(recipe), "--out", str(tmp_path / "o")])
    assert result.exit_code == 3, result.output
    assert not (tmp_path / "o").exists()
    forced = runner.invoke(
        app, ["render", str(recipe), "--out", str(tmp_path / "o"), "--force", "--json"]
    )
    assert forced.exit_code == 0, forced.output
    assert any("does not fit" in n for n in json.loads(forced.stdout)["notes"])


def test_diff_exit_codes(tmp_path: Path) -> None:
    out = tmp_path / "deployed"
    assert runner.invoke(app, ["render", str(FLAGSHIP), "--out", str(out)]).exit_code == 0
    same = runner.invoke(app, ["diff", str(FLAGSHIP), "--against", str(out)])
    assert same.exit_code == 0, same.output
    assert "up to date" in same.output
    fresh = runner.invoke(app, ["diff", str(FLAGSHIP), "--json"])
    assert fresh.exit_code == 1
    data = json.loads(fresh.stdout)
    assert data["changes"] and [h["host"] for h in data["hosts"]] == ["ai1", "ai2"]
    other = runner.invoke(app, ["diff", str(LOCAL_TINY), "--against", str(out)])
    assert other.exit_code == 1
    assert "node0" in other.output and "ai1" in other.output


def test_diff_bad_lock(tmp_path: Path) -> None:
    bad = tmp_path / "deskside.lock"
    bad.write_text("{}")
    result = runner.invoke(app, ["diff", str(FLAGSHIP), "--against", str(bad), "--json"])
    assert result.exit_code == 2
    assert "not a deskside lock" in json.loads(result.stdout)["message"]

"""`plan --vllm-version`: the release whose accounting the plan follows; a release outside
the modelled ones is planned with the nearest one's rules and the plan says so."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from deskside.cli.app import app
from deskside.planner.engine_config import VERSION_RULES, version_note
from deskside.tiny import write_tiny_model

runner = CliRunner()


def test_modelled_releases_need_no_note() -> None:
    for (major, minor), _ in VERSION_RULES:
        assert version_note(f"{major}.{minor}.0") is None
    assert version_note("0.29.1") is None  # between two rules: the older one's applies


def test_a_release_outside_says_which_rules_it_gets() -> None:
    assert "older" in (version_note("0.10.2") or "") and "0.25's" in (version_note("0.10.2") or "")
    assert "newer" in (version_note("0.40.0") or "") and "0.32's" in (version_note("0.40.0") or "")


def test_the_cli_plans_for_the_release_given(tmp_path: Path) -> None:
    model = write_tiny_model("llama", tmp_path / "m")
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 4})
    seen = {}
    for version in ("0.25.2", "0.32.0", "0.40.0"):
        r = runner.invoke(
            app,
            [
                "plan",
                "--model-dir",
                str(model),
                "--device",
                "cpu",
                "--kv-cache-memory",
                "1GiB",
                "--speculative",
                spec,
                "--vllm-version",
                version,
                "--json",
            ],
        )
        assert r.exit_code == 0, r.output
        seen[version] = json.loads(r.stdout)
        assert seen[version]["engine"]["vllm_version"] == version
    assert not any("0.32's accounting" in a for a in seen["0.32.0"]["assumptions"])
    assert any("0.32's accounting" in a for a in seen["0.40.0"]["assumptions"])


def test_a_version_that_is_no_release_is_refused(tmp_path: Path) -> None:
    model = write_tiny_model("llama", tmp_path / "m")
    r = runner.invoke(app, ["plan", "--model-dir", str(model), "--vllm-version", "latest"])
    assert r.exit_code == 2 and "is not a vLLM release" in r.output

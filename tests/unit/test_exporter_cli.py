"""`deskside exporter --once` through the CLI: the exposition parses, --json, and user
mistakes (unknown node, bad recipe, missing roots) end with an error, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from deskside.cli.app import app
from deskside.exporter import series

from .exporter_cases import FLAGSHIP, PROC, SYSFS, meminfo_kb, parse

runner = CliRunner()


def once(*extra: str, node: str = "ai1", case: str = "gb10-head") -> list[str]:
    return [
        "exporter",
        "--once",
        "--recipe",
        str(FLAGSHIP),
        "--node",
        node,
        "--sysfs-root",
        str(SYSFS / case / "sys"),
        "--proc-root",
        str(PROC / case),
        "--engine-url",
        "http://127.0.0.1:9/metrics",  # discard port: refused at once
        *extra,
    ]


def test_once_prints_an_exposition_that_parses() -> None:
    result = runner.invoke(app, once())
    assert result.exit_code == 0, result.output
    samples = parse(result.stdout)
    assert samples[series.MEMORY_AVAILABLE] == [
        ({"node": "ai1"}, meminfo_kb("gb10-head", "MemAvailable") * 1024)
    ]
    assert samples[series.ENGINE_UP] == [({"node": "ai1"}, 0.0)]
    assert samples[series.GPU_PRESENT] == [({"node": "ai1"}, 0.0)]
    assert series.GID_DRIFT in samples and series.VERSIONS in samples


def test_once_json() -> None:
    result = runner.invoke(app, once("--json"))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["node"] == "ai1"
    rows = {(s["name"], tuple(sorted(s["labels"].items()))): s["value"] for s in data["samples"]}
    assert (
        rows[(series.MEMORY_TOTAL, (("node", "ai1"),))]
        == meminfo_kb("gb10-head", "MemTotal") * 1024
    )
    assert all(set(s) == {"name", "labels", "value"} for s in data["samples"])


def test_unknown_node_is_a_usage_error() -> None:
    result = runner.invoke(app, once(node="ai9"))
    assert result.exit_code == 2
    assert "no such node" in result.stderr and "ai1, ai2" in result.stderr
    assert "Traceback" not in result.output
    as_json = runner.invoke(app, once("--json", node="ai9"))
    assert as_json.exit_code == 2
    assert "no such node" in json.loads(as_json.stdout)["message"]


def test_missing_roots_and_bad_recipes(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    result = runner.invoke(
        app,
        [
            "exporter",
            "--once",
            "--recipe",
            str(FLAGSHIP),
            "--node",
            "ai1",
            "--proc-root",
            str(missing),
        ],
    )
    assert (
        result.exit_code == 2
        and "--proc-root" in result.stderr
        and "no such directory" in result.stderr
    )
    result = runner.invoke(
        app,
        [
            "exporter",
            "--once",
            "--recipe",
            str(FLAGSHIP),
            "--node",
            "ai1",
            "--sysfs-root",
            str(missing),
        ],
    )
    assert result.exit_code == 2 and "--sysfs-root" in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: [oops\n")
    result = runner.invoke(app, ["exporter", "--once", "--recipe", str(bad), "--node", "ai1"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    result = runner.invoke(app, ["exporter", "--once", "--recipe", "no-such-recipe", "--node", "x"])
    assert result.exit_code == 2 and "no-such-recipe" in result.stderr
    result = runner.invoke(app, once("--engine-url", "ftp://x"))
    assert result.exit_code == 2 and "--engine-url" in result.stderr


def test_embedded_recipe_works_anywhere() -> None:
    result = runner.invoke(
        app,
        [
            "exporter",
            "--once",
            "--recipe",
            "local-tiny",
            "--node",
            "node1",
            "--proc-root",
            str(PROC / "gb10-worker"),
        ],
    )
    assert result.exit_code == 0, result.output
    samples = parse(result.stdout)
    assert samples[series.GPU_PRESENT] == [({"node": "node1"}, 0.0)]
    assert not [n for n in samples if n.startswith("deskside_engine_")]  # a worker


def test_help_documents_once() -> None:
    result = runner.invoke(
        app, ["exporter", "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"}
    )
    assert result.exit_code == 0
    assert "--once" in result.stdout and "seconds_since_last_token" in result.stdout

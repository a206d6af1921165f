"""`deskside up/down/status/logs` route recipes with ssh: nodes to the deploy: a node
nobody answers for fails preflight with an explanation (no traceback); `--dry-run` of a
local recipe prints its per-node transcript and changes nothing; a recorded run is what
down/status/logs act on."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import asyncssh
import pytest
from typer.testing import CliRunner

from deskside.cli.app import app
from deskside.records.run import load_run, save_run

from ..deploy_cases import ensure_tiny_model, loopback_ssh_recipe
from ..monitor_stub import run_record

runner = CliRunner()


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the socket is


def _recipe(tmp_path: Path) -> Path:
    return loopback_ssh_recipe(tmp_path, _closed_port())


def test_up_of_an_ssh_recipe_runs_the_deploy(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path)
    (tmp_path / "id").write_text("not a key\n")
    (tmp_path / "id").chmod(0o600)  # a key file others can read is refused before parsing
    known = tmp_path / "known_hosts"
    known.write_text("")
    result = runner.invoke(app, ["up", str(recipe), "--known-hosts", str(known), "--json"])
    assert "cannot use identity file" in json.loads(result.stdout)["error"]
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(tmp_path / "id"))
    result = runner.invoke(
        app, ["up", str(recipe), "--dry-run", "--known-hosts", str(known), "--json"]
    )
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["dry_run"] and report["failed_stage"] == "preflight"
    assert "node0: root@127.0.0.1:" in report["error"] and "unreachable" in report["error"]
    assert report["rollback"] is None
    result = runner.invoke(app, ["up", str(recipe), "--known-hosts", str(known)])
    assert result.exit_code == 1
    assert "up failed at preflight" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "nodes").exists()


def test_dry_run_of_a_local_recipe_prints_the_transcript(tmp_path: Path, home: Path) -> None:
    text = (Path(__file__).parents[2] / "recipes" / "local-tiny.yaml").read_text()
    recipe = tmp_path / "local.yaml"
    recipe.write_text(text)
    ensure_tiny_model(tmp_path)
    result = runner.invoke(app, ["up", str(recipe), "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["dry_run"] and report["runtime"] == "local"
    spawns = [(t["stage"], t["node"]) for t in report["transcript"] if t["op"].startswith("spawn ")]
    engines = [node for stage, node in spawns if stage == "start"]
    assert engines == ["node1", "node0"]  # workers first
    # local-tiny enables the proxy (and its gate) and the monitoring: head services, then
    # every node's
    services = [t for t in report["transcript"] if t["stage"] == "services"]
    started = [
        (t["node"], t["what"].split(" on ")[0]) for t in services if t["op"].startswith("spawn ")
    ]
    assert started == [
        ("node0", "drain gate"),  # LiteLLM reaches the engine through it
        ("node0", "LiteLLM proxy"),
        ("node0", "Prometheus"),
        ("node0", "node_exporter"),
        ("node0", "deskside node exporter"),
        ("node1", "node_exporter"),
        ("node1", "deskside node exporter"),
        ("node0", "deskside node watch"),  # survive.watch: the head's watcher
    ]
    # no secret in any operation: the proxy reads its keys from their files
    assert not any("sk-" in t["op"] for t in report["transcript"])
    assert load_run("local-tiny") is None  # nothing recorded, nothing started
    result = runner.invoke(app, ["up", str(recipe), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "dry run: nothing changed" in result.output
    assert "deskside.engine.cpu serve" in result.output


def test_down_status_logs_find_the_recorded_deploy(tmp_path: Path, home: Path) -> None:
    run = run_record(
        "ssh-tiny",
        "http://127.0.0.1:9",
        runtime="ssh",
        recipe_dir=str(tmp_path / "nodes" / "ssh-tiny"),
    )
    save_run(run)
    assert load_run("ssh-tiny") == run
    # node0 is this machine here (no ssh): nothing runs, so status says DOWN
    result = runner.invoke(app, ["status", "--json"])
    assert result.exit_code == 1, result.output
    st = json.loads(result.stdout)
    assert st["cluster"] == "DOWN" and st["recipe"] == "ssh-tiny"
    assert "nothing started by deskside runs there" in st["reasons"][0]
    result = runner.invoke(app, ["logs", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout) == {}
    result = runner.invoke(app, ["logs", "nodeX"])
    assert result.exit_code == 2 and "no node 'nodeX'" in result.output
    result = runner.invoke(app, ["down", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["stopped"]
    assert load_run("ssh-tiny") is None


def test_a_local_recipe_runs_as_processes_whatever_its_runtime_says(tmp_path: Path) -> None:
    """runtime.kind/systemd describe deployed nodes; nodes on this machine run as processes
    deskside starts (the CPU launcher here, not the image's `vllm`), with a note."""
    text = (Path(__file__).parents[2] / "recipes" / "local-tiny.yaml").read_text()
    text = text.replace("kind: native ", "kind: container ").replace(
        "systemd: false", "systemd: true"
    )
    text = text.replace(
        "  vllm_version:", "  image: x/y:1@sha256:" + "ab" * 32 + "\n  vllm_version:"
    )
    recipe = tmp_path / "local.yaml"
    recipe.write_text(text)
    ensure_tiny_model(tmp_path)
    result = runner.invoke(app, ["up", str(recipe), "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert any("run as processes started by deskside" in n for n in report["notes"])
    spawns = [
        t["op"]
        for t in report["transcript"]
        if t["op"].startswith("spawn ") and t["stage"] == "start"
    ]
    assert len(spawns) == 2 and all("-m deskside.engine.cpu serve" in op for op in spawns)

"""`deskside up/status/down/logs` of a replica set through the one face every runtime has: a
dry run lists each group's operations and then the proxy; a set whose plan does not fit is
refused before anything starts; status folds the groups' into the set's verdict; `down
--group` stops one group and keeps the set, `down` stops the set and forgets it; a run
given `--group` is refused; logs are the groups' nodes'."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deskside.cli.app import app
from deskside.records.node import NodeState, write_state
from deskside.records.replica_set import SetRecord, load_set, save_set
from deskside.records.run import RunNode, RunRecord, load_run, save_run
from deskside.transport.local import LocalTransport

from .render_cases import ROOT, load_recipe_with_model

runner = CliRunner()
SET_FILE = ROOT / "recipes" / "local-replicas.yaml"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # no recipe file of the tests' names here
    return tmp_path / "home"


def group_run(home: Path, group: str, node: str) -> RunRecord:
    name = f"rs-{group}"
    return RunRecord(
        recipe="/r.yaml",
        recipe_name=name,
        runtime="local",
        control="process",
        runtime_kind="native",
        unit=f"deskside-{name}.service",
        compose_project=f"deskside-{name}",
        api_url="http://127.0.0.1:9",  # nothing answers there
        proxy_url=None,
        served_names=["tiny"],
        started_at="2026-01-01T00:00:00+00:00",
        replica_set="rs",
        engine_keyed=True,
        nodes=[
            RunNode(
                name=node,
                role="head",
                node_rank=0,
                address="127.0.0.1",
                ssh=None,
                recipe_dir=str(home / "runs" / name / "nodes" / node),
            )
        ],
    )


def a_set() -> SetRecord:
    return SetRecord(
        recipe="/r.yaml",
        recipe_name="rs",
        runtime="local",
        groups=["a", "b"],
        proxy_url="http://127.0.0.1:4100",
        started_at="2026-01-01T00:00:00+00:00",
    )


def with_log(run: RunRecord, text: str) -> None:
    """A state file on the run's node naming a log (its engine long gone)."""
    node = run.nodes[0]
    layout = run.layout(node)
    log = layout.engine_log("engine", "20260101T000000Z")
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text(text)
    state = NodeState(
        recipe=run.recipe_name,
        node=node.name,
        role="head",
        node_rank=0,
        release=None,
        control="process",
        pid=4_000_000,  # above pid_max: no process has it
        pid_start=1,
        run_tag=f"{run.recipe_name}/{node.name}/20260101000000/engine",
        log=log,
        started_at="2026-01-01T00:00:00+00:00",
    )
    write_state(LocalTransport(), layout, state)


def test_a_dry_run_lists_every_group_then_the_proxy(home: Path) -> None:
    load_recipe_with_model(SET_FILE)  # the tiny model its plan reads
    result = runner.invoke(app, ["up", str(SET_FILE), "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["dry_run"] and report["recipe"] == "local-replicas"
    assert list(report["groups"]) == ["a", "b"]
    a = report["groups"]["a"]
    assert a["recipe"] == "local-replicas-a" and a["dry_run"] and a["ok"]
    assert {line["node"] for line in a["transcript"]} >= {"rep-a0", "rep-a1"}
    assert report["notes"] == [
        "then: LiteLLM on http://127.0.0.1:4100 over groups a, b, and a completion per name "
        "through it"
    ]
    assert load_set("local-replicas") is None  # a dry run records nothing
    result = runner.invoke(app, ["up", str(SET_FILE), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "group a" in result.stdout and "group b" in result.stdout
    assert result.stdout.count("dry run: nothing changed") == 2


def test_a_set_that_does_not_fit_is_refused_before_anything_starts(
    home: Path, tmp_path: Path
) -> None:
    model = load_recipe_with_model(SET_FILE).model.path
    text = SET_FILE.read_text().replace("kv_cache_memory: 512MiB", "kv_cache_memory: 1MiB")
    text = text.replace("path: models/tiny-llama", f"path: {model}")
    (tmp_path / "small.yaml").write_text(text)
    result = runner.invoke(app, ["up", str(tmp_path / "small.yaml"), "--json"])
    assert result.exit_code == 3, result.output
    refused = json.loads(result.stdout)
    assert refused["error"] == "PlanRefused"
    assert refused["message"].startswith("deskside refuses to launch: group a: ")
    assert load_set("local-replicas") is None and load_run("local-replicas-a") is None


def test_status_down_and_logs_of_a_set(home: Path) -> None:
    save_set(a_set())
    save_run(a := group_run(home, "a", "rep-a0"))
    result = runner.invoke(app, ["status", "rs"])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "DOWN rs: proxy http://127.0.0.1:4100 (stopped), 2 groups"
    assert "group a" in lines and "DOWN rs-a: http://127.0.0.1:9 (engine unreachable)" in lines
    assert lines[-2:] == ["group b", "  not running (no run record)"]
    result = runner.invoke(app, ["status", "--json"])
    st = json.loads(result.stdout)
    assert st["cluster"] == "DOWN" and st["groups"]["a"]["cluster"] == "DOWN"
    assert st["groups"]["b"] is None

    with_log(a, "first\nlast line of a\n")
    result = runner.invoke(app, ["logs", "rs", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"rep-a0": ["first", "last line of a"]}
    result = runner.invoke(app, ["logs", "rs", "rep-zz"])
    assert result.exit_code == 1 and "no node 'rep-zz' in a running group of rs" in result.output

    result = runner.invoke(app, ["down", "rs-a", "--group", "a", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["message"] == "--group stops one group of a replica set"
    result = runner.invoke(app, ["down", "rs", "--group", "z"])
    assert result.exit_code == 1 and "rs has no group 'z'" in result.output
    result = runner.invoke(app, ["down", "rs", "--group", "a", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "recipe": "rs",
        "group": "a",
        "stopped": True,
        "leftovers": [],
    }
    assert load_run("rs-a") is None and load_set("rs") is not None  # the set stays
    result = runner.invoke(app, ["down", "rs", "--group", "b"])
    assert result.exit_code == 0 and result.stdout == "rs group b: down\n"
    result = runner.invoke(app, ["down", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "recipe": "rs",
        "group": None,
        "stopped": True,
        "leftovers": [],
    }
    assert load_set("rs") is None


def test_a_runs_down_keeps_its_own_shape(home: Path) -> None:
    save_run(group_run(home, "a", "rep-a0").model_copy(update={"replica_set": None}))
    result = runner.invoke(app, ["down", "rs-a", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"recipe": "rs-a", "stopped": True, "leftovers": []}

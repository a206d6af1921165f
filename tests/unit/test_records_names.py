"""Which run or replica set a command means, and the recipe a record was started from: one
resolver for a run's name, a set's name, the recipe file either started from, or nothing
(the one thing running); each refusal says what to type instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskside.errors import DesksideError, UsageError
from deskside.records.names import (
    find_run,
    is_replica_set,
    recipe_file_named,
    resolve,
    run_names,
    running_name,
    running_names,
    set_names,
)
from deskside.records.read import BadState
from deskside.records.recipes import RecipeGone, load_run_recipe, run_recipe
from deskside.records.replica_set import SetRecord, save_set
from deskside.records.run import RunRecord, save_run
from deskside.records.where import run_file

from ..monitor_stub import run_record
from .render_cases import ROOT

TINY = ROOT / "src" / "deskside" / "recipes_data" / "local-tiny.yaml"
REPLICAS = ROOT / "recipes" / "local-replicas.yaml"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("DESKSIDE_HOME", str(home))
    monkeypatch.chdir(tmp_path)  # no recipe file of the tests' names here
    return home


def recipe_file(folder: Path, name: str) -> Path:
    """The embedded tiny recipe under another name, as a file."""
    path = folder / f"{name}.yaml"
    path.write_text(TINY.read_text().replace("name: local-tiny", f"name: {name}", 1))
    return path


def run_of(name: str, recipe: Path | str | None = None) -> RunRecord:
    run = run_record(name, "http://127.0.0.1:9")
    return run.model_copy(update={"recipe": str(recipe)}) if recipe is not None else run


def replica_set(name: str = "rs", groups: tuple[str, ...] = ("a", "b")) -> SetRecord:
    return SetRecord(
        recipe=str(REPLICAS),
        recipe_name=name,
        runtime="local",
        groups=list(groups),
        proxy_url=None,
        started_at="2026-01-01T00:00:00Z",
    )


def test_nothing_running() -> None:
    assert run_names() == [] and set_names() == [] and running_names() == []
    with pytest.raises(DesksideError, match="nothing is running") as info:
        resolve()
    assert "deskside up RECIPE" in (info.value.hint or "")


def test_the_one_run_is_found_without_a_name(home: Path) -> None:
    save_run(run_of("one"))
    stray = home / "runs" / "not a run name"  # a folder deskside cannot have made
    stray.mkdir()
    (stray / "run.json").write_text("{}")
    assert resolve() == run_of("one") and find_run() == run_of("one")


def test_several_runs_are_each_named() -> None:
    save_run(run_of("one"))
    save_run(run_of("two"))
    with pytest.raises(DesksideError) as info:
        resolve()
    assert info.value.message == "several runs: one, two"
    assert info.value.hint == "name one after the command, e.g. `deskside status NAME`"


def test_a_replica_set_counts_once_with_its_groups() -> None:
    save_set(replica_set())
    save_run(run_of("rs-a"))
    save_run(run_of("rs-b"))
    assert running_names() == ["rs"]
    assert resolve() == replica_set() and resolve("rs") == replica_set()
    assert resolve("rs-a") == run_of("rs-a")  # a group is a run of its own
    save_run(run_of("loose"))
    with pytest.raises(DesksideError, match="several runs: loose, rs"):
        resolve()


@pytest.mark.parametrize("name", ["rs", None])
def test_a_set_where_a_run_is_wanted_names_its_groups(name: str | None) -> None:
    save_set(replica_set())
    save_run(run_of("rs-a"))
    with pytest.raises(DesksideError) as info:
        find_run(name)
    assert info.value.message == "rs is a replica set: each of its groups is a run of its own"
    assert "rs-a, rs-b" in (info.value.hint or "") and "rs-<group>" in (info.value.hint or "")


def test_a_name_with_no_run_lists_what_runs() -> None:
    save_run(run_of("one"))
    with pytest.raises(DesksideError) as info:
        resolve("nothing-here")
    assert info.value.message == "no run named 'nothing-here', and no recipe file there"
    assert "running here: one" in (info.value.hint or "")
    with pytest.raises(DesksideError, match="local-tiny is not running here") as info:
        resolve("local-tiny")  # an embedded recipe's name
    assert "deskside up local-tiny" in (info.value.hint or "")


def test_a_name_that_is_a_path_or_an_option_is_refused() -> None:
    for bad in ("../../etc", "--all"):
        with pytest.raises(UsageError, match="is not a recipe name"):
            resolve(bad)


def test_a_recipe_file_names_its_run(tmp_path: Path) -> None:
    """(`deskside diagnose` and `deskside probe` read the given file instead of the
    recorded one.)"""
    recipe = recipe_file(tmp_path, "filed")
    save_run(run_of("filed", "/elsewhere/filed.yaml"))
    assert find_run(str(recipe)).recipe_name == "filed"
    assert recipe_file_named(str(recipe)) == recipe
    assert recipe_file_named("filed") is None  # a run's name, not a file
    other = recipe_file(tmp_path, "not-up")
    with pytest.raises(DesksideError, match="not-up is not running here") as info:
        resolve(str(other))
    assert f"deskside up {other}" in (info.value.hint or "")


def test_the_name_is_found_before_the_run_record_is_read() -> None:
    """`down` takes the run's lock first, then reads its record."""
    run_file("x").parent.mkdir(parents=True)
    run_file("x").write_text("{}")
    assert running_name("x") == "x" and running_name() == "x" and not is_replica_set("x")
    with pytest.raises(BadState, match="is not a run record deskside wrote"):
        resolve("x")


# -- the recipe a record was started from


def test_a_run_gets_its_recipe_file(tmp_path: Path) -> None:
    recipe = recipe_file(tmp_path, "filed")
    run = run_of("filed", recipe)
    got, path = run_recipe(run)
    assert got.name == "filed" and path == recipe
    assert load_run_recipe(run) == got


def test_a_run_started_with_an_overlay_gets_it_again(home: Path) -> None:
    """`up --overlay` (a tuned point): a restart reads the recipe file and lays the recorded
    engine settings over it again."""
    plain = run_of("local-tiny", home / "local-tiny.yaml")
    base, _ = run_recipe(plain)
    tuned = plain.model_copy(
        update={
            "engine_overlay": {"max_model_len": 2048, "speculative": {"num_speculative_tokens": 1}}
        }
    )
    got, _ = run_recipe(tuned)
    assert base.engine.max_model_len != 2048
    assert got.engine.max_model_len == 2048
    assert got.engine.speculative is not None and got.engine.speculative.num_speculative_tokens == 1
    assert got.engine.max_num_seqs == base.engine.max_num_seqs  # the rest is the file's


def test_a_run_whose_recipe_file_is_gone(tmp_path: Path) -> None:
    run = run_of("gone", tmp_path / "gone.yaml")
    with pytest.raises(RecipeGone) as info:
        run_recipe(run)
    assert info.value.message == (
        f"the recipe file {tmp_path / 'gone.yaml'} that gone was started from is gone"
    )
    assert info.value.exit_code == 2 and info.value.hint
    assert load_run_recipe(run) is None


def test_a_recipe_file_that_is_another_recipe_now(tmp_path: Path) -> None:
    recipe = recipe_file(tmp_path, "renamed")
    with pytest.raises(RecipeGone, match=f"{recipe} is now recipe 'renamed', not 'filed'"):
        run_recipe(run_of("filed", recipe))


def test_an_embedded_recipe_is_read_again(home: Path) -> None:
    run = run_of("local-tiny", home / "local-tiny.yaml")  # as `up local-tiny` records it
    got, path = run_recipe(run)
    assert got.name == "local-tiny" and path == home / "local-tiny.yaml"


def test_a_group_run_gets_its_groups_recipe_and_a_set_its_own() -> None:
    group = run_of("local-replicas-b", REPLICAS).model_copy(
        update={"replica_set": "local-replicas"}
    )
    got, path = run_recipe(group)
    assert got.name == "local-replicas-b" and path == REPLICAS
    assert [n.name for n in got.cluster.nodes] == ["rep-b0", "rep-b1"]
    whole, _ = run_recipe(replica_set("local-replicas"))
    assert whole.name == "local-replicas" and whole.replicas is not None

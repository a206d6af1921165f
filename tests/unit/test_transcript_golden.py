"""Golden transcripts: `deskside up --dry-run` of every shipped recipe, the operations it
would carry out node by node, in order, committed under tests/golden/<recipe>/
transcript.txt. Local recipes run through the runtime on this machine, ssh: recipes through
the deploy against fake hosts that answer as fresh nodes; the clock and this machine's
paths are fixed, so the transcript is the same everywhere. `pytest --update-golden`
rewrites them (review the diff)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from deskside.deploy.runtime import deploy
from deskside.planner.plan import Plan
from deskside.recipe.types import Recipe
from deskside.runtime.local import start_here
from deskside.runtime.pipeline import UpOptions, UpReport
from deskside.runtime.transports import HERE
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport

from .fact_answers import answer_round_trip
from .fake_hosts import GOOD_FACTS, FakeHost, Journal, fact_answer
from .render_cases import RECIPES, ROOT, load_and_plan

GOLDEN = ROOT / "tests" / "golden"
WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
CONTAINER_FACTS = (
    GOOD_FACTS
    + "docker=27.3.1\ncompose=2.29.7\nsystemd=1\n"
    + "".join(f"program={p}\n" for p in ("/opt/litellm/bin/litellm", "deskside"))
)


def dry_run(recipe_path: Path, home: Path) -> UpReport:
    recipe, plan = load_and_plan(recipe_path)
    return dry_run_recipe(recipe, recipe_path, plan)


def dry_run_recipe(recipe: Recipe, recipe_path: Path, plan: Plan) -> UpReport:
    options = UpOptions(dry_run=True)
    if any(n.ssh is not None for n in recipe.cluster.nodes):
        journal = Journal()
        hosts = {
            n.name: FakeHost(n.name, journal, plan.kv_cache_line, CONTAINER_FACTS)
            for n in recipe.cluster.nodes
        }
        return deploy(recipe, recipe_path, plan, options, transports=hosts, now=lambda: WHEN)
    here = FakeTransport(label=HERE)  # a fresh machine: no namespaces, nothing in /dev/shm
    here.default = lambda argv: (
        answer_round_trip(argv, lambda fact: fact_answer(GOOD_FACTS, fact)) or Result(0, "", "")
    )
    return start_here(
        recipe,
        recipe_path,
        plan,
        options,
        transports={HERE: here},
        python="python3",
        now=lambda: WHEN,
    )


def transcript_text(report: UpReport, home: Path) -> str:
    lines = [f"{t['stage']:<9} {t['node']:<6} {t['op']}" for t in report.transcript]
    text = "\n".join(lines) + "\n"
    return text.replace(str(home), "<home>").replace(str(ROOT), "<repo>")


@pytest.mark.parametrize("recipe_path", RECIPES, ids=[p.stem for p in RECIPES])
def test_dry_run_transcript(
    recipe_path: Path, update_golden: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("DESKSIDE_HOME", str(home))
    report = dry_run(recipe_path, home)
    assert report.ok, (report.failed_stage, report.error, report.hint)
    assert report.dry_run and report.release is None
    assert not (home / "runs").exists()  # nothing recorded: nothing started
    text = transcript_text(report, home)
    golden = GOLDEN / recipe_path.stem / "transcript.txt"
    if update_golden:
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden} differs; rerun with --update-golden"
    # every node appears, and every node's engine starts after the workers' (workers first)
    starts = [
        t["node"] for t in report.transcript if t["stage"] == "start" and "start" in t["what"]
    ]
    nodes = [n for n in dict.fromkeys(starts)]
    assert nodes[-1] == next(
        n.name for n in load_and_plan(recipe_path)[0].cluster.nodes if n.role == "head"
    )

"""User-facing text stands on its own: recipes, docs, the README, rendered files and the
bench help cite nothing a user does not have, and the flagship recipe's "(flagship.md #N)"
comments point at decisions that docs/flagship.md really has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deskside.cli.app import app

ROOT = Path(__file__).parents[2]
FLAGSHIP_DOC = ROOT / "docs" / "flagship.md"
FLAGSHIP_RECIPE = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"
EMBEDDED_TINY = ROOT / "src" / "deskside" / "recipes_data" / "local-tiny.yaml"

# Sources users do not have, and paths of a development machine.
FORBIDDEN = re.compile(r"\bseeds?\b|\barticle\b|REFERENCE(\.md| §)|/work/")
# The bench has a real random seed (--seed); citations of a source are what must not appear.
CITATION = re.compile(r"\bseed('s| #| decision| article| engine)|\barticle\b|REFERENCE|/work/")

USER_TEXT = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "docs").rglob("*.json"),
        *(ROOT / "recipes").glob("*.yaml"),
        *(ROOT / "recipes").glob("*/config.json"),
        EMBEDDED_TINY,
        *(ROOT / "src" / "deskside" / "render" / "templates").iterdir(),
        *(p for p in (ROOT / "tests" / "golden").glob("*/bundle/**/*") if p.is_file()),
    ]
)


@pytest.mark.parametrize("path", USER_TEXT, ids=lambda p: str(p.relative_to(ROOT)))
def test_cites_nothing_users_lack(path: Path) -> None:
    text = path.read_text()
    found = [
        f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
        for m in FORBIDDEN.finditer(text)
    ]
    assert found == []


def test_bench_help_cites_nothing_users_lack() -> None:
    result = CliRunner().invoke(app, ["bench", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "TTFT" in result.output
    assert CITATION.search(result.output) is None


def decisions() -> dict[int, str]:
    """docs/flagship.md's decisions: `### N. Title` headings."""
    return {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"^### (\d+)\. (.+)$", FLAGSHIP_DOC.read_text(), re.MULTILINE)
    }


def test_flagship_decisions_are_numbered_one_to_n() -> None:
    numbers = sorted(decisions())
    assert numbers == list(range(1, len(numbers) + 1))
    assert len(numbers) >= 30


def test_flagship_recipe_comments_point_at_real_decisions() -> None:
    text = FLAGSHIP_RECIPE.read_text()
    cited = {int(n) for n in re.findall(r"flagship\.md #(\d+)", text)}
    for first, last in re.findall(r"flagship\.md #(\d+)-#(\d+)", text):
        cited |= set(range(int(first), int(last) + 1))
    known = decisions()
    assert cited and cited <= set(known), sorted(cited - set(known))
    # every decision that is a recipe value is cited where the value is
    assert set(known) - cited == set(), sorted(set(known) - cited)


def test_every_decision_says_how_deskside_handles_it() -> None:
    sections = re.split(r"^### \d+\. ", FLAGSHIP_DOC.read_text(), flags=re.MULTILINE)[1:]
    assert len(sections) == len(decisions())
    assert all("**In deskside**" in s for s in sections)


def test_embedded_tiny_recipe_explains_itself() -> None:
    text = EMBEDDED_TINY.read_text()
    assert "docs/" not in text and "flagship.md" not in text
    assert (ROOT / "recipes" / "local-tiny.yaml").read_bytes() == EMBEDDED_TINY.read_bytes()

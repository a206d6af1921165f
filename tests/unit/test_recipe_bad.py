"""Every recipe in bad_recipes/ must be refused with a located, explained RecipeError.

Each file starts with `# expect: LINE[:COL] SUBSTRING`: one of the reported problems is at
that 1-based line (and column), and its text (message and hint, as `format_recipe_error`
prints them) contains SUBSTRING.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from deskside.errors import RecipeError
from deskside.recipe.load import format_recipe_error, load_recipe

BAD = Path(__file__).parent / "bad_recipes"
EXPECT = re.compile(r"# expect: (?P<line>\d+)(?::(?P<col>\d+))? (?P<text>.+)")
CASES = sorted(BAD.glob("*.yaml"))


def test_there_are_many_bad_recipes() -> None:
    assert len(CASES) >= 35


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_bad_recipe_is_refused_at_its_line(path: Path) -> None:
    first_line = path.read_text(encoding="utf-8").splitlines()[0]
    expect = EXPECT.fullmatch(first_line)
    assert expect, f"{path.name}: first line must be '# expect: LINE[:COL] TEXT'"
    line = int(expect["line"])
    column = int(expect["col"]) if expect["col"] else None
    text = expect["text"]

    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    err = info.value
    assert err.exit_code == 2
    assert err.location is not None and err.location.line is not None
    assert err.problems, "a RecipeError from the loader lists its problems"

    def matches(problem: RecipeError) -> bool:
        loc = problem.location
        if loc is None or loc.line != line:
            return False
        if column is not None and loc.column != column:
            return False
        return text in f"{problem.message}\n{problem.hint or ''}"

    shown = format_recipe_error(err)
    assert any(matches(p) for p in err.problems), f"expected {first_line!r}, got:\n{shown}"
    assert str(path) in shown
    assert f"{path}:{line}:" in shown
    # the summary points at the first problem in the file
    assert (err.location.line, err.location.column) == min(
        (p.location.line or 0, p.location.column or 0) for p in err.problems if p.location
    )
    for problem in err.problems:
        assert problem.hint, f"every problem has a hint: {problem.message}"

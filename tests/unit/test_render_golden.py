"""Golden bundles: every recipe under recipes/ renders to the files committed under
tests/golden/<recipe>/bundle/ — same paths, same bytes, same modes. `pytest
--update-golden` rewrites them after an intended change (review the diff)."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from ..bundles import read_bundle_dir
from .render_cases import RECIPES, ROOT, render_path

GOLDEN = ROOT / "tests" / "golden"


@pytest.mark.parametrize("recipe_path", RECIPES, ids=[p.stem for p in RECIPES])
def test_golden_bundle(recipe_path: Path, update_golden: bool) -> None:
    folder = GOLDEN / recipe_path.stem / "bundle"
    bundle = render_path(recipe_path)
    if update_golden:
        shutil.rmtree(folder, ignore_errors=True)
        bundle.write(folder)
    expected = read_bundle_dir(folder)
    assert sorted(bundle) == sorted(expected), (
        f"{folder}: files differ; rerun with --update-golden if intended"
    )
    for path, data in bundle.items():
        assert data == expected[path], (
            f"{folder / path} differs; rerun with --update-golden if intended"
        )
        on_disk = stat.S_IMODE((folder / path).stat().st_mode)
        assert bool(on_disk & 0o111) == bool(bundle.mode(path) & 0o111), f"{path}: mode"


@pytest.mark.parametrize("recipe_path", RECIPES, ids=[p.stem for p in RECIPES])
def test_render_is_reproducible(recipe_path: Path) -> None:
    first = render_path(recipe_path)
    second = render_path(recipe_path)
    assert list(first.items()) == list(second.items())
    assert [first.mode(p) for p in first] == [second.mode(p) for p in second]


def test_bundle_does_not_depend_on_where_the_recipe_is(tmp_path: Path) -> None:
    """A copy of the repo's recipes elsewhere renders the same bytes (CI clones into
    another folder than the developer's)."""
    copy = tmp_path / "elsewhere" / "recipes"
    shutil.copytree(ROOT / "recipes", copy, ignore=shutil.ignore_patterns("models"))
    for recipe_path in RECIPES:
        here = render_path(recipe_path)
        there = render_path(copy / recipe_path.name)
        assert dict(here) == dict(there), recipe_path.name

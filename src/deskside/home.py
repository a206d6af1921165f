"""Where deskside keeps its state: $DESKSIDE_HOME (default ~/.deskside) holds generated
models and one run directory per recipe (state, logs), so `status`, `logs` and `down` work
from another shell. Tests point everything at a temporary folder with that one variable."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from deskside.errors import UsageError
from deskside.recipe.load import load_recipe, load_recipe_text
from deskside.recipe.types import Recipe


def deskside_home() -> Path:
    return Path(os.environ.get("DESKSIDE_HOME") or Path.home() / ".deskside").expanduser()


def runs_dir() -> Path:
    return deskside_home() / "runs"


def embedded_recipes() -> dict[str, str]:
    """Recipe name -> YAML text of the recipes shipped inside the package."""
    out: dict[str, str] = {}
    for entry in resources.files("deskside.recipes_data").iterdir():
        if entry.name.endswith(".yaml"):
            out[entry.name.removesuffix(".yaml")] = entry.read_text()
    return out


def resolve_recipe(arg: str | Path) -> tuple[Recipe, Path]:
    """A recipe file, or the name of an embedded recipe (its relative paths then resolve
    against $DESKSIDE_HOME)."""
    path = Path(arg)
    if path.exists():
        return load_recipe(path), path
    embedded = embedded_recipes()
    if str(arg) in embedded:
        home = deskside_home()
        virtual = home / f"{arg}.yaml"
        return load_recipe_text(embedded[str(arg)], str(virtual), base_dir=home), virtual
    raise UsageError(
        f"{arg}: no such recipe file",
        hint="give a path to a recipe YAML, or one of the embedded recipes: "
        + ", ".join(sorted(embedded)),
    )

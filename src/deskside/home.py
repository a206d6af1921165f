"""Where deskside keeps its state, and what a recipe argument names.

$DESKSIDE_HOME (default ~/.deskside) holds the models deskside makes and one run directory
per recipe (state, logs), so `status`, `logs` and `down` work from another shell. Tests
point everything at a temporary folder with that one variable.

Every command that takes a recipe resolves it with :func:`resolve_recipe`: a recipe file,
or the name of a recipe shipped inside deskside (``deskside.recipes_data``). An embedded
recipe's relative paths resolve against $DESKSIDE_HOME, and the tiny model it serves
(declared in ``recipes_data/tiny-models.toml``) is made there on first use."""

from __future__ import annotations

import difflib
import os
import tomllib
from importlib import resources
from pathlib import Path

from deskside.errors import Location, UsageError
from deskside.recipe.load import load_recipe, load_recipe_text
from deskside.recipe.types import Recipe
from deskside.safefs import deskside_home as deskside_home
from deskside.safefs import make_dirs
from deskside.tiny import ARCHS, ensure_tiny_model

TINY_MODELS_FILE = "tiny-models.toml"
"""In ``deskside.recipes_data``: embedded recipe name -> the tiny architecture it serves."""


def runs_dir() -> Path:
    return deskside_home() / "runs"


def embedded_recipes() -> dict[str, str]:
    """Recipe name -> YAML text of the recipes shipped inside the package."""
    out: dict[str, str] = {}
    for entry in resources.files("deskside.recipes_data").iterdir():
        if entry.name.endswith(".yaml"):
            out[entry.name.removesuffix(".yaml")] = entry.read_text()
    return out


def embedded_tiny_models() -> dict[str, str]:
    """Embedded recipe name -> the ``deskside.tiny`` architecture of the model it serves."""
    text = resources.files("deskside.recipes_data").joinpath(TINY_MODELS_FILE).read_text()
    table = tomllib.loads(text)
    bad = {name: arch for name, arch in table.items() if arch not in ARCHS}
    if bad:  # a packaging mistake of ours, caught by the unit tests
        raise ValueError(f"{TINY_MODELS_FILE}: unknown tiny architecture(s) {bad}")
    return {str(name): str(arch) for name, arch in table.items()}


def ensure_embedded_model(name: str, recipe: Recipe) -> bool:
    """Make the tiny model the embedded recipe `name` serves, at its model.path, unless it
    is there. True when this call made it. Written to a temporary folder and renamed into
    place, so two commands at once never see half a model."""
    arch = embedded_tiny_models().get(name)
    if arch is None or recipe.model.path is None:
        return False
    model = Path(recipe.model.path)
    if not model.exists():
        make_dirs(model.parent)  # 0700 under $DESKSIDE_HOME whatever the umask, no links
    return ensure_tiny_model(arch, model)


def resolve_recipe(arg: str | Path, *, make_model: bool = True) -> tuple[Recipe, Path]:
    """The recipe `arg` names and the path it is known by.

    `arg` is a recipe file, or else the name of an embedded recipe: that one loads as if it
    were the file $DESKSIDE_HOME/NAME.yaml (its relative paths resolve there) and, unless
    `make_model` is false, its tiny model is made on first use. A file of the same name as
    an embedded recipe wins. Anything else is a UsageError (exit 2) that says where deskside
    looked and what it knows. Whatever exists at `arg` (a link, a FIFO, a device) is read as
    a recipe file, which refuses anything but a regular file of a recipe's size."""
    path = Path(arg)
    if os.path.lexists(path) and not path.is_dir():
        return load_recipe(path), path
    name = str(arg)
    embedded = embedded_recipes()
    if name in embedded:
        home = deskside_home()
        virtual = home / f"{name}.yaml"
        recipe = load_recipe_text(embedded[name], str(virtual), base_dir=home)
        if make_model:
            ensure_embedded_model(name, recipe)
        return recipe, virtual
    raise _not_found(name, path, sorted(embedded))


def is_embedded(arg: str | Path) -> bool:
    """Whether `arg` names an embedded recipe (no file of that name is there)."""
    path = Path(arg)
    exists = os.path.lexists(path) and not path.is_dir()
    return not exists and str(arg) in embedded_recipes()


def _not_found(name: str, path: Path, embedded: list[str]) -> UsageError:
    where = Location(path=str(path.absolute()))
    if path.is_dir():
        inside = sorted(p.name for p in path.glob("*.yaml"))
        return UsageError(
            f"{name} is a folder, not a recipe file",
            hint="give one of its recipes: " + ", ".join(inside)
            if inside
            else "give a recipe YAML file",
            location=where,
        )
    hints = []
    close = difflib.get_close_matches(name, embedded, n=1)
    if close:
        hints.append(f"Did you mean the embedded recipe {close[0]!r}?")
    for suffix in (".yaml", ".yml"):
        if path.suffix != suffix and path.with_name(path.name + suffix).is_file():
            hints.append(f"Did you mean the file {path.name + suffix}?")
    hints.append(
        "Give a recipe YAML file, or the name of an embedded recipe: " + ", ".join(embedded)
    )
    return UsageError(
        f"no such recipe file, and no embedded recipe is named {name!r}",
        hint=" ".join(hints),
        location=where,
    )

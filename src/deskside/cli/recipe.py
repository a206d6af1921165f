"""`deskside schema`, `deskside validate` and the `deskside model` group (tiny models here;
pull, manifest, verify and sync in their own modules)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from deskside.cli import model_pull, model_sync
from deskside.cli.common import JsonFlag, RecipeArg, emit_json, fail, out
from deskside.errors import DesksideError, UsageError
from deskside.terminal import shown
from deskside.tiny import ARCHS

model_app = typer.Typer(
    help="Model weights: pull the pinned revision, manifest, verify, sync to the workers; "
    "tiny local models for tests and demos."
)


def schema() -> None:
    """Print the recipe JSON Schema (for editors)."""
    from deskside.recipe.schema import recipe_json_schema

    emit_json(recipe_json_schema())


def validate(recipe: RecipeArg, as_json: JsonFlag = False) -> None:
    """Load a recipe and report the first problems, located."""
    from deskside.home import resolve_recipe

    try:
        loaded, _ = resolve_recipe(recipe, make_model=False)  # the model is not read
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(
            {"ok": True, "name": loaded.name, "nodes": [n.name for n in loaded.cluster.nodes]}
        )
    else:
        nodes = len(loaded.cluster.nodes)
        out.print(f"[green]ok[/] {shown(recipe)}: {shown(loaded.name)}, {nodes} node(s)")


@model_app.command("tiny")
def model_tiny(
    arch: Annotated[str, typer.Option(help="One of: " + ", ".join(ARCHS) + ".")] = "deepseek-v3",
    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write.")] = Path("tiny-model"),
    as_json: JsonFlag = False,
) -> None:
    """Write a tiny model (config.json + a locally trained tokenizer) for vLLM's dummy
    weights: no downloads."""
    from deskside.tiny import write_tiny_model

    if arch not in ARCHS:
        fail(UsageError(f"unknown arch {arch!r}", hint="one of " + ", ".join(ARCHS)), as_json)
    path = write_tiny_model(arch, out_dir)
    if as_json:
        emit_json({"arch": arch, "path": str(path)})
    else:
        out.print(f"wrote tiny {shown(arch)} model to {shown(path)}")


model_app.command("pull")(model_pull.pull)
model_app.command("manifest")(model_sync.model_manifest)
model_app.command("verify")(model_sync.model_verify)
model_app.command("sync")(model_sync.model_sync)

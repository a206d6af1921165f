"""`deskside model pull RECIPE`: the recipe's pinned weights into the Hugging Face cache."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from deskside.cli.common import JsonFlag, RecipeArg, emit_json, err, fail, out
from deskside.errors import DesksideError, RecipeError
from deskside.recipe.types import Recipe
from deskside.terminal import shown

if TYPE_CHECKING:
    from rich.progress import TaskID

CacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache",
        help="Hugging Face cache folder (HF_HOME layout: files go under DIR/hub). "
        "Default: the recipe's runtime.hf_cache.",
    ),
]
PatternOpt = Annotated[
    list[str] | None,
    typer.Option(help="Only files matching this pattern (e.g. '*.safetensors'); repeatable."),
]
ExcludeOpt = Annotated[
    list[str] | None, typer.Option(help="Skip files matching this pattern; repeatable.")
]


def pull(
    recipe: RecipeArg,
    cache: CacheOpt = None,
    include: PatternOpt = None,
    exclude: ExcludeOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Download the recipe's model (model.repo at model.revision) into the Hugging Face
    cache and check every file against the hub's digests."""
    from deskside.home import resolve_recipe
    from deskside.models.pull import PullSpec
    from deskside.models.pull import pull as run_pull

    try:
        loaded, where = resolve_recipe(recipe, make_model=False)
        spec = PullSpec(
            repo=repo_of(loaded, where),
            revision=str(loaded.model.revision),
            hf_home=cache if cache is not None else Path(loaded.runtime.hf_cache),
            include=tuple(include or ()),
            exclude=tuple(exclude or ()),
            cache_from_flag=cache is not None,
        )
        if as_json:
            result = run_pull(spec)
        else:
            with _Bars() as bars:
                result = run_pull(spec, bars)
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(result.to_dict())
    else:
        _print(result)
    if not result.ok:
        raise typer.Exit(1)


def repo_of(recipe: Recipe, path: Path) -> str:
    """model.repo, or a RecipeError located at model.path: a local folder has nothing to pull."""
    if recipe.model.repo is not None:
        return recipe.model.repo
    from deskside.recipe.problems import single_error

    line, column = _position(path, ("model", "path"))
    raise single_error(
        str(path),
        line,
        column,
        "model.path",
        "this recipe serves a local folder (model.path): there is nothing to pull",
        "pull needs model.repo and model.revision; to copy a local folder to the nodes, "
        "deploy the recipe",
    )


def _position(path: Path, loc: tuple[str, ...]) -> tuple[int, int]:
    """1-based line and column of a field of the recipe at `path` (1, 1 when unknown)."""
    from deskside.home import embedded_recipes
    from deskside.recipe.yaml_tree import RecipeText

    try:
        text = path.read_text() if path.is_file() else embedded_recipes().get(path.stem, "")
        line, column = RecipeText(text, str(path)).read().positions.get(loc, (0, 0))
    except (OSError, UnicodeDecodeError, RecipeError):
        return 1, 1
    return line + 1, column + 1


def _print(result: object) -> None:
    from deskside.models.pull import PullResult
    from deskside.units import format_bytes

    assert isinstance(result, PullResult)
    bad = [f for f in result.files if f.status not in ("downloaded", "cached")]
    got = sum(1 for f in result.files if f.status == "downloaded")
    via_xet = sum(1 for f in result.files if f.transfer == "xet")
    how = f"{via_xet} with hf_xet {result.xet}, " if via_xet else ""
    if result.xet is None:
        how = f"plain HTTP: {result.xet_note}, "
    resumed = sum(1 for f in result.files if f.resumed_from)
    if resumed:
        how += f"{resumed} resumed from an earlier pull, "
    for f in bad:
        what = f.message or f"{f.algorithm} {f.actual} but the hub lists {f.expected}"
        err.print(f"[bold red]{shown(f.status)}:[/] {shown(f.path)}: {shown(what)}")
        if f.removed:
            err.print(f"  [dim]removed from the cache:[/] {shown(', '.join(f.removed))}")
        if f.command:
            err.print(f"  [dim]not downloaded by this pull; to remove it:[/] {shown(f.command)}")
    if bad:
        err.print(
            f"  [dim]hint:[/] run the same command again to download the {len(bad)} file(s) "
            "again; if it repeats, the hub, a mirror (HF_ENDPOINT) or a proxy serves wrong "
            "bytes"
        )
        return
    out.print(
        f"[green]ok[/] {shown(result.repo)}@{shown(result.revision[:12])}: "
        f"{len(result.files)} files checked, {got} downloaded "
        f"({shown(how)}{format_bytes(result.downloaded_bytes)}), "
        f"in {shown(result.snapshot)}"
    )
    if via_xet:
        out.print(
            "[dim]note:[/] files fetched with hf_xet resume after an interruption as "
            "huggingface_hub and hf_xet allow; deskside resumes only the big files it fetches "
            "over plain HTTP"
        )


class _Bars:
    """One Rich progress bar per file, on stderr."""

    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=err,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> _Bars:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def _task(self, path: str) -> TaskID:
        with self._lock:
            if path not in self._tasks:
                self._tasks[path] = self._progress.add_task(shown(path), total=None)
            return self._tasks[path]

    def start(self, path: str, total: int | None, done: int) -> None:
        self._progress.update(self._task(path), total=total, completed=done)

    def advance(self, path: str, n: int) -> None:
        self._progress.advance(self._task(path), n)

    def finish(self, path: str, status: str) -> None:
        task = self._task(path)
        colour = {"downloaded": "green", "cached": "green", "checking": "dim"}.get(status, "red")
        self._progress.update(task, description=f"{shown(path)} [{colour}]{status}[/]")

    def note(self, text: str) -> None:
        self._progress.console.print(f"[dim]{shown(text)}[/]")

"""`deskside model manifest | verify | sync`: thin faces over deskside.models."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TransferSpeedColumn

from deskside.cli.common import JsonFlag, RecipeArg, emit_json, err, fail, out
from deskside.errors import DesksideError
from deskside.terminal import shown
from deskside.units import format_bytes

KnownHosts = Annotated[
    str | None,
    typer.Option(help="ssh: nodes: known_hosts file (default ~/.ssh/known_hosts)."),
]
Folder = Annotated[
    Path, typer.Argument(help="Model folder, or a snapshot of the Hugging Face cache.")
]


@contextmanager
def _bar(what: str, total: int, quiet: bool) -> Iterator[Callable[[int], None] | None]:
    if quiet:
        yield None
        return
    columns = ("{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)


def model_manifest(
    folder: Folder,
    out_file: Annotated[Path | None, typer.Option("--out", help="Write the manifest here.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Every file of the folder with its size and sha256 (hashed in parallel; a snapshot's
    unchanged files come from its record). Links of a snapshot may lead only into its own
    cache entry's blobs/."""
    from deskside.models.manifest import manifest_bytes, manifest_of, total_bytes, write_manifest

    try:
        with _bar("hashing", total_bytes(folder) if folder.is_dir() else 0, as_json) as step:
            data, hashed = manifest_of(folder, progress=step)
        if out_file is not None:
            write_manifest(data, out_file)
    except DesksideError as exc:
        fail(exc, as_json)
    files = data["files"]
    size = sum(f["size"] for f in files)
    if as_json:
        emit_json({**data, "hashed": hashed, "out": str(out_file) if out_file else None})
    elif out_file is None:
        typer.echo(manifest_bytes(data).decode(), nl=False)
    else:
        out.print(
            f"{len(files)} files, {format_bytes(size)} ({hashed} hashed, the rest unchanged "
            f"since their record) -> {shown(out_file)}"
        )


def model_verify(
    folder: Folder,
    manifest: Annotated[Path, typer.Option("--manifest", help="The manifest to check against.")],
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="Trust the record's hash of each file whose size, mtime, ctime and inode "
            "are unchanged; hash only the others.",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Compare the folder with a manifest: every file differing, missing, extra, or a link
    leading out of the cache entry. Hashes every file unless --quick. Exits 1 on a
    difference."""
    from deskside.models.manifest import load_manifest, total_bytes
    from deskside.models.verify import verify

    try:
        data = load_manifest(manifest)
        total = 0 if quick or not folder.is_dir() else total_bytes(folder)
        with _bar("hashing", total, as_json or quick) as step:
            report = verify(folder, data, quick=quick, progress=step)
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(report.to_dict())
    else:
        how = (
            f"quick: {report.files - report.hashed} of {report.files} files taken from the "
            f"record by size, mtime, ctime and inode, {report.hashed} hashed"
            if quick
            else f"all {report.files} files hashed"
        )
        for d in report.differences:
            out.print(f"[red]{d.kind}[/] {shown(d.path)}: {shown(d.detail)}", highlight=False)
        verdict = "[green]ok[/]" if report.ok else f"[red]{len(report.differences)} differ[/]"
        out.print(f"{verdict} {shown(folder)} ({how})")
    if not report.ok:
        raise typer.Exit(1)


def model_sync(
    recipe: RecipeArg,
    streams: Annotated[int, typer.Option(min=1, max=32, help="TCP streams per worker.")] = 4,
    full: Annotated[
        bool, typer.Option("--full", help="Hash every file on the workers, whatever their record.")
    ] = False,
    known_hosts: KnownHosts = None,
    as_json: JsonFlag = False,
) -> None:
    """Copy the pinned revision's snapshot from the head's Hugging Face cache to every
    worker over the fabric: only files whose sha256 differs, each checked on arrival, an
    interrupted copy going on where it stopped. Exits 1 when a worker is not in sync."""
    from deskside.home import resolve_recipe
    from deskside.models.sync import Sync
    from deskside.runtime.transports import transport_for

    try:
        loaded, _ = resolve_recipe(recipe)
        transports = {n.name: transport_for(n, known_hosts) for n in loaded.cluster.nodes}
        if as_json:
            head, results = Sync(loaded, transports, streams=streams, full=full).run()
        else:
            columns = ("{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn())
            with Progress(*columns, console=err, transient=True) as bar:
                tasks: dict[str, TaskID] = {}

                def show(node: str, done: int, total: int) -> None:
                    if node not in tasks:
                        tasks[node] = bar.add_task(shown(node), total=total)
                    bar.update(tasks[node], completed=done)

                head, results = Sync(
                    loaded, transports, progress=show, streams=streams, full=full
                ).run()
    except DesksideError as exc:
        fail(exc, as_json)
    ok = all(r.ok for r in results)
    if as_json:
        emit_json(
            {
                "ok": ok,
                "repo": head.get("repo"),
                "revision": head.get("revision"),
                "files": len(head["files"]),
                "bytes": sum(f["size"] for f in head["files"]),
                "nodes": [r.to_dict() for r in results],
            }
        )
    else:
        for r in results:
            rate = r.bytes / r.seconds / 1e6 if r.seconds else 0.0
            mark = "[green]ok[/]" if r.ok else "[red]not in sync[/]"
            out.print(
                f"{mark} {shown(r.node)} ({shown(r.address)}): {r.files} files copied "
                f"({format_bytes(r.bytes)}, {rate:,.0f} MB/s), {r.skipped} already the same"
            )
            for p in r.problems:
                out.print(f"  [red]-[/] {shown(p)}", highlight=False)
            for h in r.hints:
                out.print(f"  [dim]hint:[/] {shown(h)}", highlight=False)
    if not ok:
        raise typer.Exit(1)

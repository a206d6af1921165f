"""`deskside exporter`: the node's Prometheus exporter (deskside.exporter)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from deskside.cli.common import JsonFlag, OldRunOpt, chosen_run, emit_json, err, fail, out
from deskside.cli.guard import (
    CgroupOpt,
    StateDirOpt,
    cgroup_folder,
    find_node,
    guardian_for,
    log_line,
)
from deskside.errors import DesksideError, UsageError
from deskside.exporter.series import EXPORTER_PORT
from deskside.terminal import shown

if TYPE_CHECKING:
    from deskside.recipe.types import Node, Recipe


def _root(path: Path, flag: str) -> Path:
    if not path.is_dir():
        raise UsageError(f"{flag} {path}: no such directory")
    return path


def _engine_url(recipe: Recipe, node: Node, given: str | None) -> str | None:
    if given is not None:
        if not given.startswith(("http://", "https://")):
            raise UsageError(
                f"--engine-url {given!r} is not an http(s) URL",
                hint="e.g. http://127.0.0.1:8000/metrics",
            )
        return given
    if node.role != "head":
        return None  # workers run no API server
    from deskside.engine.launch import probe_url

    return probe_url(recipe) + "/metrics"


def exporter(
    node: Annotated[str, typer.Option("--node", help="The recipe's node this machine is.")],
    recipe: Annotated[
        str | None,
        typer.Argument(help="Recipe file, or an embedded recipe's name.", show_default=False),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option(help="Address to listen on (default: the node's address in the recipe)."),
    ] = None,
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free port).")
    ] = EXPORTER_PORT,
    sysfs_root: Annotated[
        Path, typer.Option(help="Where sysfs is (RDMA devices and their GID tables).")
    ] = Path("/sys"),
    proc_root: Annotated[
        Path, typer.Option(help="Where procfs is (meminfo, the engine process).")
    ] = Path("/proc"),
    engine_url: Annotated[
        str | None,
        typer.Option(
            help="The engine's /metrics (default on the head: the recipe's engine address "
            "and port; workers run no API server and report no engine series)."
        ),
    ] = None,
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Print one exposition and exit. A single sample cannot tell how long the "
            "token counter has stood still: deskside_engine_seconds_since_last_token is 0 "
            "when no request runs and left out when requests run.",
        ),
    ] = False,
    state_dir: StateDirOpt = None,
    cgroup: CgroupOpt = None,
    old_recipe: OldRunOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Serve this node's deskside_* series on /metrics for Prometheus: memory against the
    plan's safety floor, RoCE GID index and drift, GPU readings (or gpu_present 0), engine
    progress (head) and versions. Runs until SIGTERM or Ctrl-C. With guard.enforce in the
    recipe it is also the node's memory guard (see `deskside guard`)."""
    from deskside.exporter.collect import Sources, registry_for
    from deskside.exporter.gpu import open_nvml
    from deskside.exporter.serve import exposition, samples, serve
    from deskside.home import resolve_recipe
    from deskside.layout import NodeLayout

    def warn(message: str) -> None:
        err.print(f"[yellow]warning:[/] {shown(message)}", highlight=False)

    from deskside.recipe.groups import engine_recipe_of

    try:
        recipe = chosen_run(recipe, old_recipe)
        if recipe is None:
            raise UsageError("name the recipe", hint="deskside node exporter RECIPE --node NODE")
        loaded, path = resolve_recipe(recipe)
        loaded = engine_recipe_of(loaded, node)  # a replica set: the node's group
        me = find_node(loaded, node)
        proc = _root(proc_root, "--proc-root")
        folder = cgroup_folder(cgroup, sysfs_root, proc)
        guardian = None
        if loaded.guard.enforce and not once:
            guardian = guardian_for(
                loaded, path, me, state_dir=state_dir, proc_root=proc, cgroup=folder, log=log_line
            )
        sources = Sources(
            recipe=loaded,
            recipe_path=path,
            node=me,
            sysfs_root=_root(sysfs_root, "--sysfs-root"),
            proc_root=proc,
            engine_url=_engine_url(loaded, me, engine_url),
            nvml=open_nvml(),
            once=once,
            warn=warn,
            cgroup=folder,
            guardian=guardian,
            state_dir=Path(NodeLayout.of(loaded).recipe_dir) if state_dir is None else state_dir,
        )
        registry, _ = registry_for(sources)
        if once:
            if as_json:
                emit_json({"node": me.name, "samples": samples(registry)})
            else:
                typer.echo(exposition(registry), nl=False)
            return
        address = host or me.address

        def ready(bound_host: str, bound_port: int) -> None:
            shown_host = f"[{bound_host}]" if ":" in bound_host else bound_host
            url = f"http://{shown_host}:{bound_port}/metrics"
            if as_json:
                emit_json({"node": me.name, "url": url}, indent=None)
            else:
                out.print(
                    f"serving {shown(url)} for node {shown(me.name)} of {shown(loaded.name)}"
                    " (SIGTERM or Ctrl-C stops)",
                    highlight=False,
                )

        until = guardian.start()[1] if guardian is not None else None
        try:
            serve(registry, address, port, ready)
        finally:
            if until is not None:
                until.set()
    except DesksideError as exc:
        fail(exc, as_json)

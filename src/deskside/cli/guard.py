"""`deskside guard`: the memory guard of one node, without the exporter's HTTP server
(deskside.guard). The exporter runs the same loop when the recipe sets guard.enforce."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from deskside.cli.common import JsonFlag, RecipeArg, emit_json, err, fail, out
from deskside.errors import DesksideError, UsageError
from deskside.terminal import shown

if TYPE_CHECKING:
    from deskside.guard.watch import Guardian
    from deskside.recipe.types import Node, Recipe

StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        help="The node's state folder, where deskside records the engine it started "
        "(state.json) and the guard writes why it stopped it (guard.json). Default: "
        "runtime.root/<recipe name>, as deployed."
    ),
]
CgroupOpt = Annotated[
    str | None,
    typer.Option(
        help="The memory cgroup folder whose headroom (limit less working set) counts as "
        "available memory too, with its ancestors' limits; 'none': MemAvailable only. "
        "Default: this process's own memory cgroup (the node's, when the node is a container "
        "or a machine with a memory limit)."
    ),
]


def find_node(recipe: Recipe, name: str) -> Node:
    for node in recipe.cluster.nodes:
        if node.name == name:
            return node
    raise UsageError(
        f"--node {name!r}: recipe {recipe.name} has no such node",
        hint="nodes: " + ", ".join(n.name for n in recipe.cluster.nodes),
    )


def cgroup_folder(given: str | None, sys_root: Path, proc_root: Path) -> Path | None:
    from deskside.guard.cgroup import layout_of, scope_folder

    if given is None:
        return scope_folder(sys_root, proc_root)
    if given == "none":
        return None
    folder = Path(given)
    if not folder.is_dir() or layout_of(folder) is None:
        raise UsageError(
            f"--cgroup {given}: not a memory cgroup folder",
            hint="e.g. /sys/fs/cgroup/memory/machine.slice (cgroup v1) or "
            "/sys/fs/cgroup/machine.slice (v2); 'none' watches MemAvailable only",
        )
    return folder


def guardian_for(
    recipe: Recipe,
    path: Path,
    node: Node,
    *,
    state_dir: Path | None,
    proc_root: Path,
    cgroup: Path | None,
    log: Callable[[str], None] | None = None,
) -> Guardian:
    """The node's guard as the recipe configures it (floor: the plan's safety floor)."""
    from deskside.exporter.memory import floor_bytes
    from deskside.guard.watch import Guardian
    from deskside.layout import NodeLayout

    layout = (
        NodeLayout.at(str(state_dir), recipe.name)
        if state_dir is not None
        else NodeLayout.of(recipe)
    )
    guardian = Guardian(
        recipe=recipe,
        node=node.name,
        floor=floor_bytes(recipe, path, node),
        layout=layout,
        proc_root=proc_root,
        cgroup=cgroup,
    )
    if log is not None:
        guardian.log = log
    return guardian


def log_line(message: str) -> None:
    err.print(f"guard: {shown(message)}", highlight=False)


def guard(
    recipe: RecipeArg,
    node: Annotated[str, typer.Option("--node", help="The recipe's node this machine is.")],
    state_dir: StateDirOpt = None,
    proc_root: Annotated[Path, typer.Option(help="Where procfs is (meminfo).")] = Path("/proc"),
    sysfs_root: Annotated[Path, typer.Option(help="Where sysfs is (fs/cgroup).")] = Path("/sys"),
    cgroup: CgroupOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Stop this node's engine when its available memory stays under the plan's safety
    floor for guard.window seconds (the recipe must set guard.enforce: true). Samples every
    guard.interval seconds until SIGTERM or Ctrl-C; each stop is logged, recorded in the
    node's state folder and shown by `deskside status`. --json prints one JSON object when
    it starts and one per stop."""
    import signal
    import threading
    from types import FrameType

    from deskside.home import resolve_recipe
    from deskside.recipe.groups import engine_recipe_of
    from deskside.units import format_bytes

    try:
        loaded, path = resolve_recipe(recipe)
        loaded = engine_recipe_of(loaded, node)  # a replica set: the node's group
        me = find_node(loaded, node)
        if not loaded.guard.enforce:
            raise UsageError(
                f"recipe {loaded.name} does not enable the guard",
                hint="set guard.enforce: true in the recipe (guard.window and guard.interval "
                "tune it)",
            )
        if not proc_root.is_dir():
            raise UsageError(f"--proc-root {proc_root}: no such directory")
        folder = cgroup_folder(cgroup, sysfs_root, proc_root)
        guardian = guardian_for(
            loaded, path, me, state_dir=state_dir, proc_root=proc_root, cgroup=folder
        )
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        guardian.log = lambda message: None
        guardian.on_stop = lambda record: emit_json(record.model_dump(), indent=None)
    else:
        guardian.log = log_line
    started = {
        "node": me.name,
        "floor_bytes": guardian.floor,
        "window_seconds": guardian.window,
        "interval_seconds": guardian.interval,
        "cgroup": str(folder) if folder is not None else None,
        "state_dir": guardian.layout.recipe_dir,
    }
    if as_json:
        emit_json(started, indent=None)
    else:
        out.print(
            f"guarding node {shown(me.name)} of {shown(loaded.name)}: the engine stops when "
            f"available memory stays under {format_bytes(guardian.floor)} for "
            f"{guardian.window:g} s (SIGTERM or Ctrl-C ends the guard)",
            highlight=False,
        )
    until = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        until.set()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        guardian.run(until)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)

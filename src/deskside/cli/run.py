"""`deskside up`, `down`, `status`, `logs` and `demo`: one face for every runtime (this
machine's processes and namespaces, SSH hosts, or a replica set of them);
`deskside.operate.select` picks it."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from deskside.cli.common import (
    JsonFlag,
    OldRunOpt,
    RecipeArg,
    RunArg,
    chosen_run,
    emit_json,
    err,
    fail,
    out,
    steps,
)
from deskside.errors import DesksideError, UsageError
from deskside.terminal import literal, shown

# The runtimes, the demo and the report load inside each command: `deskside exporter` and
# the other commands start without them.

KnownHosts = Annotated[
    str | None,
    typer.Option(help="ssh: nodes: known_hosts file (default ~/.ssh/known_hosts)."),
]


def up(
    recipe: RecipeArg,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for readiness.")] = 900,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Read the nodes' facts, then print every command the start would run on "
            "each node, in order; change nothing.",
        ),
    ] = False,
    known_hosts: KnownHosts = None,
    overlay: Annotated[
        Path | None,
        typer.Option(
            help="Engine settings laid over the recipe (the overlay `deskside tune` writes)."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Plan, then start every node (workers first, then the head) and wait until every
    served name answers. Nodes on this machine run as processes (or in network
    namespaces); ssh: nodes get a new release over SSH, rolled back on failure. An embedded
    recipe (local-tiny) leaves out, with a note, a service that is not installed here (the
    LiteLLM proxy, Prometheus); a recipe file that enables one refuses to start without it."""
    from deskside.cli.report import print_up
    from deskside.home import is_embedded, resolve_recipe
    from deskside.operate.select import runtime_for
    from deskside.records.names import run_lock
    from deskside.runtime.pipeline import UpOptions

    try:
        loaded, path = resolve_recipe(recipe)
        engine_overlay = None
        if overlay is not None:
            from deskside.recipe.overlay import read_overlay_for

            loaded, engine_overlay = read_overlay_for(loaded, overlay)
        runtime = runtime_for(loaded, known_hosts)
        options = UpOptions(
            known_hosts=known_hosts,
            dry_run=dry_run,
            timeout=timeout,
            skip_missing_services=is_embedded(recipe),
            engine_overlay=engine_overlay,
        )
        with run_lock(loaded.name), steps("starting") as say:
            report = runtime.up(loaded, path, options, progress=say)
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(report.to_dict())
    else:
        print_up(out, err, report)
    if not report.ok:
        raise typer.Exit(report.exit_code or 1)


def down(
    run: RunArg = None,
    known_hosts: KnownHosts = None,
    forget: Annotated[
        bool,
        typer.Option(
            "--forget",
            help="Signal nothing; remove deskside's own records of the run on this machine "
            "(for a run whose engines are gone but whose records deskside cannot trust).",
        ),
    ] = False,
    group: Annotated[
        str | None,
        typer.Option(help="A replica set: stop this group only (the proxy routes around it)."),
    ] = None,
    old_run: OldRunOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Stop the run: engines head first (SIGTERM, SIGKILL after a grace period, or their
    systemd unit / Compose project), then the proxy; a run on this machine also loses the
    shared memory it left and the network namespaces it created."""
    from deskside.cli.report import print_down
    from deskside.operate.select import runtime_of
    from deskside.records.names import only_run_name, resolve, run_lock, running_name
    from deskside.records.run import forget as forget_run

    try:
        run = chosen_run(run, old_run)
    except DesksideError as exc:
        fail(exc, as_json)
    if forget:
        try:
            name = run or only_run_name()
            with run_lock(name):
                removed = forget_run(name)
        except DesksideError as exc:
            fail(exc, as_json)
        if as_json:
            emit_json({"recipe": name, "forgotten": removed})
        else:
            out.print(f"{shown(name)}: forgot {len(removed)} record(s); nothing was signalled")
        return
    try:
        name = running_name(run)
        with run_lock(name):  # its record is read under the lock
            found = resolve(name)
            stopped = runtime_of(found, known_hosts).down(found, group=group)
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(stopped.to_dict())
    else:
        print_down(out, err, stopped)
    if not stopped.ok:
        raise typer.Exit(stopped.exit_code)


def status(
    run: RunArg = None,
    known_hosts: KnownHosts = None,
    old_run: OldRunOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Per node: role, pid, state, memory; the cluster READY / STARTING / DEGRADED /
    WEDGED / DOWN with reasons (WEDGED: requests run, no token comes, every process alive;
    the suspected nodes named); KV usage and requests from /metrics; what `deskside watch`
    last did. Exit 1 unless READY."""
    from deskside.cli.report import print_status
    from deskside.operate.select import status_of
    from deskside.records.names import resolve

    try:
        st = status_of(resolve(chosen_run(run, old_run)), known_hosts)
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(st.to_dict())
    else:
        print_status(out, st)
    if not st.ok:
        raise typer.Exit(st.exit_code)


def logs(
    run: RunArg = None,
    node: Annotated[
        str | None, typer.Argument(help="Node name (default: all).", show_default=False)
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines from the end.")] = 40,
    known_hosts: KnownHosts = None,
    old_run: OldRunOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Print (and follow) the engine logs of the run's nodes: `deskside logs [RUN] [NODE]`
    (a lone NODE of the only run also works; a replica set's are its groups')."""
    from deskside.operate.select import runtime_of
    from deskside.records.names import resolve
    from deskside.runtime.nodes import log_follow, log_tail

    try:
        run, node = _run_and_node(chosen_run(run, old_run), node)
        found = resolve(run)
        opened = runtime_of(found, known_hosts).logs(found, node)
        if as_json:
            emit_json({log.node: log_tail(log, lines).splitlines() for log in opened})
            return
        many = len(opened) > 1

        def write(name: str, text: str) -> None:
            for line in text.splitlines():  # control characters written out, not obeyed
                shown_line = literal(line)
                sys.stdout.write(f"[{literal(name)}] {shown_line}\n" if many else f"{shown_line}\n")
            sys.stdout.flush()

        for log in opened:
            write(log.node, log_tail(log, lines))
        pending = {log.node: "" for log in opened}  # a line still being written
        while follow:
            time.sleep(0.5)
            for log in opened:
                text = pending[log.node] + log_follow(log)
                complete, _, pending[log.node] = text.rpartition("\n")
                write(log.node, complete)
    except DesksideError as exc:
        fail(exc, as_json)


def _run_and_node(first: str | None, node: str | None) -> tuple[str | None, str | None]:
    """`logs X`: X is a run when it names one, else a node of the only run."""
    from deskside.records.names import find_run, running_name

    if first is None or node is not None:
        return first, node
    try:
        running_name(first)
        return first, None
    except DesksideError:
        try:
            only = find_run(None)
        except DesksideError:
            only = None
        if only is None:
            raise
        if any(n.name == first for n in only.nodes):
            return None, first
        raise UsageError(
            f"no run named {first!r}, and no node {first!r} in {only.recipe_name}",
            hint="its nodes: " + ", ".join(n.name for n in only.nodes),
        ) from None


def demo(
    keep_up: Annotated[bool, typer.Option(help="Leave the cluster running.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """The embedded two-node run: a tiny DeepSeek-V3-architecture model, TP=2 across two
    nodes on this machine with MTP speculative decoding, real chat completions, the plan
    beside the engine's own KV line, then everything torn down."""
    from deskside.cli.report import print_demo
    from deskside.demo import run_demo

    t0 = time.monotonic()
    try:
        with steps("starting") as say:
            result = run_demo(say, keep_up)
    except DesksideError as exc:
        fail(exc, as_json)
    result["total_seconds"] = round(time.monotonic() - t0, 1)
    if as_json:
        emit_json(result)
        return
    print_demo(out, result)

"""Restarting a running cluster's engines in place (the recovery of `deskside watch`):
every engine stopped, workers first, then started again, workers first, then the head,
and the cluster waited for until it serves. The proxy, the monitoring and the run's
network stay as they are; each node's state keeps its services.

How an engine starts again depends on its control: a process is spawned again from what
started it (a deployed release's `launch.sh`, or for a run on this machine the recipe's
launch line), a systemd unit is started, a Compose project brought up.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime

from deskside import secrets
from deskside.errors import DesksideError
from deskside.httpclient import METRICS
from deskside.httpclient import client as bounded_client
from deskside.identity import stop_command
from deskside.records.node import NodeState, read_state
from deskside.records.run import RunNode, RunRecord, load_run, save_run
from deskside.runtime.control import Control, engine_claim, watched
from deskside.runtime.ops import Executed, Op, Record, Run, Spawn, execute, stamp
from deskside.runtime.phases import (
    cluster_phases,
    first_token_at,
    launch_lock,
    release_lock,
    timed_start,
)
from deskside.runtime.ready import wait_ready
from deskside.transport.base import Transport

Say = Callable[[str], None]


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="seconds")


def workers_first(run: RunRecord) -> list[RunNode]:
    return sorted(run.nodes, key=lambda n: (n.role == "head", n.node_rank))


def stop_engine(control: Control, state: NodeState, grace: float) -> list[list[str]]:
    """Stop the engine only (its services keep running). `Unproven` when the state does
    not prove the process deskside's (nothing is signalled then)."""
    if control.kind == "systemd":
        return [[*control.sudo, "systemctl", "stop", control.layout.unit_name]]
    if control.kind == "compose":
        return [control.compose("stop")]
    if state.pid is None:
        return []
    return [stop_command(engine_claim(state), grace)]


def _local_spawns(run: RunRecord, say: Say) -> tuple[dict[str, Spawn], str]:
    """The engine launch of each node of a run on this machine, from its recipe, and what
    it starts (`deskside.runtime.phases.launch_lock`)."""
    from deskside.planner.inputs import plan_recipe
    from deskside.records.recipes import run_recipe
    from deskside.runtime.local import LocalStart
    from deskside.runtime.pipeline import UpOptions

    recipe, path = run_recipe(run)  # a replica group's run: its group's recipe
    plan = plan_recipe(recipe, path)
    start = LocalStart(
        recipe, path, plan, UpOptions(), say, sys.executable, lambda: datetime.now(UTC)
    )
    if not run.keyed:  # no proxy fronts the engine: it takes no key
        start.skip.append("proxy")
    out: dict[str, Spawn] = {}
    for la in start.launches:
        spawn = next(op for op in start._start_ops(la) if isinstance(op, Spawn))
        out[la.node] = spawn
    return out, launch_lock(start.launches)


def start_ops(
    run: RunRecord,
    node: RunNode,
    control: Control,
    old: NodeState,
    now: datetime,
    local: Mapping[str, Spawn],
) -> list[Op]:
    state = old.model_copy(
        update={"pid": None, "pid_start": None, "run_tag": None, "started_at": _iso(now)}
    )
    what = f"restarting {node.role} {node.name} (node rank {node.node_rank})"
    if control.kind == "process":
        if old.release is None:
            return [replace(local[node.name], state=state, what=what)]
        release = control.layout.release(old.release)
        log = control.layout.engine_log(old.release, stamp(now))
        return control.start_ops(
            node.name, state, argv=("sh", f"{release}/launch.sh"), cwd=release, log=log, what=what
        )
    ops: list[Op] = [Record(node.name, control.layout, state, what)]
    if control.kind == "systemd":
        ops.append(
            Run(
                node.name,
                (*control.sudo, "systemctl", "start", control.layout.unit_name),
                what,
                600,
            )
        )
    else:
        ops.append(Run(node.name, tuple(control.compose("up", "--detach")), what, 600))
    return ops


def restart_engines(
    run: RunRecord,
    transports: Mapping[str, Transport],
    controls: Mapping[str, Control],
    say: Say = lambda _m: None,
    grace: float = 20.0,
    timeout: float = 900.0,
) -> str:
    """Restart the run's engines (see the module docstring); returns what was done. A
    DesksideError says which step failed."""
    states: dict[str, NodeState] = {}
    for n in run.nodes:
        state = read_state(transports[n.name], run.layout(n), run.recipe_name)
        if state is None:
            raise DesksideError(f"{n.name}: no engine recorded there: nothing to restart")
        states[n.name] = state
    order = workers_first(run)
    # every stop built first: a state that does not prove its engine stops nothing at all
    stops = {n.name: stop_engine(controls[n.name], states[n.name], grace) for n in order}
    for n in order:
        say(f"{n.name}: stopping the engine")
        for argv in stops[n.name]:
            r = transports[n.name].run(argv, timeout=grace + 120)
            if not r.ok:
                raise DesksideError(
                    f"{n.name}: stopping the engine failed: {r.stderr.strip()[-300:]}"
                )
    now = datetime.now(UTC)
    head_release = states[next(n.name for n in run.nodes if n.role == "head")].release
    local: dict[str, Spawn] = {}
    lock = release_lock(head_release) if head_release is not None else ""
    if any(s.release is None for s in states.values()):
        local, lock = _local_spawns(run, say)
    ops: list[Op] = []
    for n in order:
        ops += start_ops(run, n, controls[n.name], states[n.name], now, local)
    t0 = time.time()  # the start-up phases count from here
    done = execute(ops, transports, Executed(), say)
    spawned_at = time.time()
    nodes = [
        watched(n.name, done.states[n.name], controls[n.name], transports[n.name], n.name)
        for n in order
    ]
    auth = secrets.engine_auth(run.recipe_name, run.keyed)
    found = wait_ready(
        api_url=run.api_url,
        served_names=run.served_names,
        planned_kv_cache_tokens=run.planned_kv_cache_tokens,
        nodes=nodes,
        timeout=timeout,
        say=say,
        interval=1.0,
        client=bounded_client(METRICS, headers=auth),
    )
    head = next(n.name for n in run.nodes if n.role == "head")
    seconds = cluster_phases(
        t0=t0,
        process_started=spawned_at,
        seen=found.seen,
        head=head,
        health=found.health_at,
        first_token=first_token_at(run.api_url, run.served_names[0], auth),
    )
    startup = timed_start(run.recipe_name, "restart", lock, _iso(now), seconds, say)
    current = load_run(run.recipe_name)
    if current is not None and current.started_at == run.started_at:
        save_run(current.model_copy(update={"startup": startup}))
    return f"engines restarted (workers first: {', '.join(n.name for n in order)}); serving again"


__all__ = ["restart_engines", "stop_engine", "workers_first"]

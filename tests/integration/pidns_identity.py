"""Run inside a PID namespace of its own (see test_identity_pidns.py): start a foreign
process, name it in deskside's records as a state file would that lacks a run tag, has an
empty one, or lacks a start time, run every path that signals, and print as JSON whether
the foreign process outlived each. Then one process with a whole record, stopped by `down`.

`python -m tests.integration.pidns_identity` with DESKSIDE_HOME set; nothing here may run
outside the namespace the test made (it signals what deskside would signal)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from deskside.doctor.run import Doctor
from deskside.doctor.runs import node_layout
from deskside.errors import DesksideError
from deskside.facts.procs import RUN_TAG, parse_stat
from deskside.guard.act import Low, stop_engine
from deskside.home import resolve_recipe
from deskside.layout import NodeLayout
from deskside.operate.status import ClusterStatus
from deskside.operate.watch import Watch
from deskside.recipe.types import Recipe
from deskside.records.node import NodeState, ServiceState, write_state
from deskside.records.replica_set import ProxyProcess, SetRecord
from deskside.records.run import RunNode, RunRecord
from deskside.replicas.stop import down_set
from deskside.runtime import nodes
from deskside.transport.local import LocalTransport

HERE = LocalTransport()
STARTED = "2026-01-01T00:00:00+00:00"


def start_ticks(pid: int) -> int:
    stat = parse_stat(Path(f"/proc/{pid}/stat").read_text())
    assert stat is not None
    return stat.start_ticks


def alive(pid: int) -> bool:
    stat = (
        parse_stat(Path(f"/proc/{pid}/stat").read_text()) if Path(f"/proc/{pid}").exists() else None
    )
    return stat is not None and stat.state not in ("Z", "X")


def foreign() -> subprocess.Popen[bytes]:
    """A process deskside did not start, looking like an engine (argv[0] `vllm`), in a
    session of its own, without any run tag."""
    env = {k: v for k, v in os.environ.items() if k != RUN_TAG}
    code = "import os; os.execvp('sleep', ['vllm', '300'])"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{proc.pid}/cmdline").read_bytes()[:4] != b"vllm":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc


def run_record(recipe: Recipe) -> RunRecord:
    return RunRecord(
        recipe="local-tiny",
        recipe_name=recipe.name,
        runtime="local",
        control="process",
        runtime_kind="native",
        unit=f"deskside-{recipe.name}",
        compose_project=f"deskside-{recipe.name}",
        api_url="http://127.0.0.1:9",
        proxy_url=None,
        served_names=["tiny"],
        started_at=STARTED,
        nodes=[  # the head only: the foreign process is named as its engine
            RunNode(
                name=recipe.head.name,
                role="head",
                node_rank=0,
                address="127.0.0.1",
                ssh=None,
                recipe_dir=node_layout(recipe, None, recipe.head).recipe_dir,
            )
        ],
    )


def node_state(recipe: Recipe, layout: NodeLayout, **fields: object) -> NodeState:
    base: dict[str, object] = {
        "recipe": recipe.name,
        "node": recipe.head.name,
        "role": "head",
        "node_rank": 0,
        "release": None,
        "control": "process",
        "log": f"{layout.logs}/engine.log",
        "started_at": STARTED,
    }
    return NodeState.model_validate({**base, **fields})


def attempt(action: Callable[[], object]) -> str:
    try:
        return f"returned {action()!r}"[:300]
    except DesksideError as exc:
        return f"refused: {exc.message}"[:300]


def doctor_fix(doctor: Doctor, pid: int) -> list[tuple[str, bool]]:
    """doctor, then its --fix: (kind, fixed) of every finding naming `pid`."""
    report = doctor.fix(doctor.run())
    return [(f.kind, f.fixed) for f in report.findings if f.detail.get("pid") == pid]


def main() -> None:
    recipe, path = resolve_recipe("local-tiny", make_model=False)
    head = recipe.head
    layout = node_layout(recipe, None, head)
    run = run_record(recipe)
    ts = {n.name: HERE for n in recipe.cluster.nodes}
    victim = foreign()
    pid, start = victim.pid, start_ticks(victim.pid)
    tag = f"{recipe.name}/{head.name}/20260101000000/engine"
    records = {
        "no tag": {"pid": pid, "pid_start": start, "run_tag": None},
        "empty tag": {"pid": pid, "pid_start": start, "run_tag": ""},
        "no start": {"pid": pid, "pid_start": None, "run_tag": tag},
    }
    results: list[dict[str, object]] = []

    def check(path: str, record: str, action: Callable[[], object]) -> None:
        outcome = attempt(action)
        results.append({"path": path, "record": record, "outcome": outcome, "alive": alive(pid)})

    for name, claim in records.items():
        engine = node_state(recipe, layout, **claim)
        service = node_state(
            recipe,
            layout,
            services=[
                ServiceState(
                    name="proxy",
                    pid=pid,
                    pid_start=claim["pid_start"],  # type: ignore[arg-type]
                    run_tag=claim["run_tag"].replace("/engine", "/proxy")  # type: ignore[union-attr]
                    if claim["run_tag"]
                    else claim["run_tag"],  # type: ignore[arg-type]
                    log=f"{layout.logs}/proxy.log",
                ).model_dump()
            ],
        )
        for kind, state in (("engine", engine), ("service", service)):
            label = f"{name} ({kind} state)"
            write_state(HERE, layout, state)
            check("down", label, partial(nodes.down, run, 1, ts))
            write_state(HERE, layout, state)
            low = Low("MemAvailable", 1, 2, 1.0, 1.0)
            check("guard", label, partial(stop_engine, HERE, recipe, layout, head.name, low))
            write_state(HERE, layout, state)
            st = ClusterStatus(
                recipe.name, "WEDGED", run.api_url, "healthy", [], None, 1.0, 0.0, []
            )
            watch = Watch(recipe.name, bundle=None, transports=ts)
            check("recovery", label, partial(watch._recover, run, ts, st, time.time()))
            write_state(HERE, layout, state)
            check(
                "doctor --fix", label, partial(doctor_fix, Doctor(recipe, path, ts, here=HERE), pid)
            )
        proxy = ProxyProcess(
            pid=pid,
            pid_start=claim["pid_start"],  # type: ignore[arg-type]
            run_tag=str(claim["run_tag"] or ""),
            log="/dev/null",
        )
        record = SetRecord(
            recipe="local-replicas",
            recipe_name="pidns-set",
            runtime="local",
            groups=["a"],
            proxy_url="http://127.0.0.1:9",
            proxy=proxy,
            started_at=STARTED,
        )
        label = f"{name} (replica set's proxy)"
        if name != "no tag":  # a proxy record always has a tag field: empty is its "none"
            check("replica set down", label, partial(down_set, record, 1))

    # a whole record: the process deskside started (its tag inherited), stopped by down
    ours = HERE.spawn(["sleep", "300"], env={RUN_TAG: tag}, log_path=f"{layout.logs}/ours.log")
    time.sleep(0.3)
    write_state(
        HERE, layout, node_state(recipe, layout, pid=ours, pid_start=start_ticks(ours), run_tag=tag)
    )
    leftovers = nodes.down(run, 1, ts)
    time.sleep(0.3)
    with_record = {"leftovers": leftovers, "alive": alive(ours)}
    print(json.dumps({"foreign": pid, "results": results, "whole": with_record}))
    victim.kill()


if __name__ == "__main__":
    Path(os.environ["DESKSIDE_HOME"]).mkdir(parents=True, exist_ok=True)
    main()

"""Taking looks at a running cluster and keeping their series (`deskside status`,
`deskside watch`): the head's /metrics and every node's engine processes, appended to the
run's series (`deskside.records.looks`), and the verdict of the whole series
(`deskside.survive.classify`)."""

from __future__ import annotations

import time
from collections.abc import Mapping

import httpx

from deskside.engine.http import TIMEOUT, parse_metrics
from deskside.errors import DesksideError
from deskside.operate.proc_sample import cgroup_sample, parse_sample, session_sample
from deskside.recipe.survive import Survive
from deskside.records.looks import append_look_line, look_lines
from deskside.records.node import NodeState
from deskside.records.run import RunNode, RunRecord
from deskside.runtime.control import Control
from deskside.survive.classify import Verdict, classify
from deskside.survive.history import Look, observations, series
from deskside.survive.observe import EngineSample, ProcessSample, Thresholds
from deskside.transport.base import Transport


def server_load(client: httpx.Client, url: str) -> float | None:
    """The requests the API server accepted and has not finished: vLLM's /load
    (`get_server_load_metrics`; counted with --enable-server-load-tracking, which deskside
    starts every head with). None when it does not answer a number."""
    try:
        r = client.get(f"{url}/load", timeout=TIMEOUT)
        value = r.json().get("server_load") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def engine_sample(client: httpx.Client, url: str, at: float) -> EngineSample:
    """The head's counters now (vLLM v1 names; see deskside.survive.observe), and the
    requests its API server holds (`server_load`)."""
    try:
        r = client.get(f"{url}/metrics", timeout=TIMEOUT)
        if r.status_code != 200:
            return EngineSample(at=at, up=False)
        m = parse_metrics(r.text)
    except (httpx.HTTPError, ValueError):
        return EngineSample(at=at, up=False)
    return EngineSample(
        accepted=server_load(client, url),
        at=at,
        up=True,
        running=m.get("vllm:num_requests_running"),
        waiting=m.get("vllm:num_requests_waiting"),
        generation_tokens=m.get("vllm:generation_tokens_total"),
        prompt_tokens=m.get("vllm:prompt_tokens_total"),
        engine_steps=m.get("vllm:iteration_tokens_total_count"),
        finished_requests=m.get("vllm:request_success_total"),
    )


def node_processes(
    node: RunNode, t: Transport, control: Control, state: NodeState, at: float
) -> list[ProcessSample]:
    """The node's engine processes now (process and systemd control; none for Compose)."""
    if control.kind == "process" and state.pid is not None:
        argv = session_sample(state.pid, state.pid_start, state.run_tag, state.log)
    elif control.kind == "systemd" and control.runtime == "native":
        shown = t.run(
            [
                *control.sudo,
                "systemctl",
                "show",
                "-p",
                "MainPID",
                "--value",
                control.layout.unit_name,
            ],
            timeout=30,
        )
        main = shown.stdout.strip()
        if not shown.ok or not main.isdigit():
            return []
        argv = cgroup_sample(int(main))
    else:
        return []
    try:
        r = t.run(argv, timeout=30)
    except DesksideError:
        return []
    return parse_sample(r.stdout, node.name, node.role, at)[0] if r.ok else []


def series_key(run: RunRecord, head_state: NodeState | None) -> str:
    """Looks of one start of the engines: a restart begins a new series."""
    return f"{run.started_at}/{head_state.started_at if head_state else '-'}"


def append_look(recipe_name: str, look: Look) -> None:
    append_look_line(recipe_name, look.to_json())


def load_looks(recipe_name: str, key: str, now: float) -> list[Look]:
    return series(look_lines(recipe_name), key, now)


def thresholds(survive: Survive | None) -> Thresholds:
    if survive is None:
        return Thresholds()
    return Thresholds(stall_seconds=survive.stall_seconds, stopped_seconds=survive.stopped_seconds)


def take_look(
    run: RunRecord,
    client: httpx.Client,
    nodes: Mapping[str, tuple[Transport, Control, NodeState | None]],
    key: str,
    url: str | None = None,
) -> Look:
    at = time.time()
    engine = engine_sample(client, url or run.api_url, at)
    procs: list[ProcessSample] = []
    for n in run.nodes:
        t, control, state = nodes[n.name]
        if state is not None:
            procs += node_processes(n, t, control, state, at)
    return Look(at=at, run_started_at=key, engine=engine, processes=tuple(procs))


def judge(
    run: RunRecord,
    client: httpx.Client,
    nodes: Mapping[str, tuple[Transport, Control, NodeState | None]],
    survive: Survive | None,
    second_look_after: float = 1.0,
) -> tuple[Verdict, Look]:
    """Take a look, add it to the run's series and classify the series. Without a recent
    look in the series a second one follows `second_look_after` seconds later (CPU time
    needs two readings)."""
    head = next(n for n in run.nodes if n.role == "head")
    key = series_key(run, nodes[head.name][2])
    look = take_look(run, client, nodes, key)
    append_look(run.recipe_name, look)
    looks = load_looks(run.recipe_name, key, look.at)
    if second_look_after > 0 and not [x for x in looks if look.at - 30 < x.at < look.at]:
        time.sleep(second_look_after)
        look = take_look(run, client, nodes, key)
        append_look(run.recipe_name, look)
        looks = load_looks(run.recipe_name, key, look.at)
    obs = observations(looks, look.at, run.ready_at is not None)
    return classify(obs, thresholds(survive)), look


__all__ = ["append_look", "engine_sample", "judge", "load_looks", "take_look", "thresholds"]

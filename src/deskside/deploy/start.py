"""The deploy's last stages: engines.

    start      the running engines stopped (the head first, then every worker at once),
               then every worker started at once, then the head, then the services
               (proxy, monitoring; `deskside.deploy.services`) on every node at once;
               each node's pid/log in its state file
    ready      `deskside.runtime.ready.wait_ready` over the nodes' logs and liveness, read
               over SSH (every node at once); every service answering
    contract   one completion for every served name, through the proxy when configured,
               else through the head

A deploy that changes nothing (same files, same model folder, engines running) leaves the
engines alone and only checks readiness and the contract.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from deskside import secrets
from deskside.deploy.deployment import Deployment, iso
from deskside.deploy.services import service_ops
from deskside.records.node import NodeState
from deskside.runtime.contract import require_contract
from deskside.runtime.control import watched
from deskside.runtime.ops import Executed, Local, Op, Record, Spawn, at_once, stamp
from deskside.runtime.phases import cluster_phases, first_token_at, release_lock, timed_start
from deskside.runtime.pipeline import Outcome
from deskside.runtime.ready import Watched, wait_ready
from deskside.runtime.service_start import wait_services


def stop_ops(d: Deployment, states: Mapping[str, NodeState | None]) -> dict[str, list[Op]]:
    """Stopping the engines `states` describe, per node, head first."""
    out: dict[str, list[Op]] = {}
    for node in d.stop_order:
        state = states.get(node)
        if state is not None:
            out[node] = d.controls[node].stop_ops(node, state, d.options.grace)
    return out


def start_waves(d: Deployment, releases: Mapping[str, str]) -> list[list[Op]]:
    """Start each node's release: every worker at once, then (once they all started) the
    head, then the services (proxy, monitoring) on every node at once."""
    workers: list[Op] = []
    heads: list[Op] = []
    started = d.now()
    for node in d.start_order:
        rid = releases[node]
        la = d.launch(node)
        release = d.layout.release(rid)
        state = NodeState(
            recipe=d.recipe.name,
            node=node,
            role=la.role,
            node_rank=la.node_rank,
            release=rid,
            control=d.controls[node].kind,
            started_at=iso(started),
        )
        ops = d.controls[node].start_ops(
            node,
            state,
            argv=("sh", f"{release}/launch.sh"),
            cwd=release,
            log=d.layout.engine_log(rid, stamp(started)),
            what=f"starting {la.role} {node} (node rank {la.node_rank}, release {rid})",
        )
        # vLLM's multi-node start: the head (rank 0) waits for the headless workers
        (heads if la.role == "head" else workers).extend(ops)
    rid = releases[d.head]
    states = {
        op.node: op.state
        for op in workers + heads
        if isinstance(op, Spawn | Record) and op.state is not None
    }
    services, d.services, notes = service_ops(d, rid, states)
    d.report.notes += [n for n in notes if n not in d.report.notes]
    return [workers, heads, services]


def stop_waves(d: Deployment, stops: Mapping[str, list[Op]]) -> list[list[Op]]:
    """Stopping engines: the head first (no new requests), then every worker at once."""
    head = stops.get(d.head, [])
    return [head, [op for node in d.stop_order if node != d.head for op in stops.get(node, [])]]


def start(d: Deployment) -> Outcome:
    if d.unchanged:
        d.executed.states.update({n: s for n, s in d.old_states.items() if s is not None})
        return Outcome("engines left running", skipped=True)
    assert d.rid is not None
    d.old_stops = stop_ops(d, {n: s for n, s in d.old_states.items() if d.old_alive.get(n)})

    # `down` finds the nodes even if this process dies during the start
    def mark() -> None:
        d.t0 = time.time()  # the start-up phases count from here
        d.record(d.rid, ready=False)

    here = Local("record the deploy on this machine", mark)
    waves: list[list[Op]] = [
        *stop_waves(d, d.old_stops),
        [here],
        *start_waves(d, dict.fromkeys(d.nodes, d.rid)),
    ]

    def started(executed: Executed) -> None:
        d.spawned_at = time.time()
        d.old_alive = dict.fromkeys(d.old_alive, False)

    return Outcome(f"{len(d.nodes)} nodes started", waves=[w for w in waves if w], after=started)


class PollRound:
    """The readiness loop polls its nodes one after the other; this polls every node at
    once when the loop asks for one it has no answer for, and hands each node its own."""

    def __init__(self, nodes: Sequence[Watched]) -> None:
        self.polls = {n.name: n.poll for n in nodes}
        self.answers: dict[str, tuple[bool, bytes]] = {}
        for n in nodes:
            n.poll = functools.partial(self.poll, n.name)

    def poll(self, node: str) -> tuple[bool, bytes]:
        if node not in self.answers:
            self.answers = at_once(self.polls, lambda n: self.polls[n]())
        return self.answers.pop(node)


def wait_started(d: Deployment, states: Mapping[str, NodeState]) -> str | None:
    """Readiness of the engines `states` describe (every node polled at once); the
    services' too."""
    nodes = [
        watched(
            node,
            states[node],
            d.controls[node],
            d.t(node),
            f"{d.t(node).name}:{states[node].log or d.layout.unit_name}",
        )
        for node in d.start_order
        if node in states
    ]
    PollRound(nodes)
    found = wait_ready(
        api_url=d.report.api_url,
        served_names=d.report.served_names,
        planned_kv_cache_tokens=d.plan.kv_cache_tokens,
        nodes=nodes,
        timeout=d.options.timeout,
        say=d.say,
        interval=d.options.poll_interval,
        client=d.http(10, secrets.engine_auth(d.recipe.name, d.recipe.engine_keyed)),
    )
    if d.rid is not None and d.t0:
        seconds = cluster_phases(
            t0=d.t0,
            process_started=d.spawned_at,
            seen=found.seen,
            head=d.head,
            health=found.health_at,
            first_token=first_token_at(
                d.report.api_url,
                d.report.served_names[0],
                secrets.engine_auth(d.recipe.name, d.recipe.engine_keyed),
                d.options.http_transport,
            ),
        )
        d.startup = timed_start(
            d.recipe.name,
            d.options.start_kind,
            release_lock(d.rid),
            iso(datetime.fromtimestamp(d.t0, UTC)),
            seconds,
            d.say,
        )
        d.report.startup = d.startup.model_dump(mode="json")
    if d.services:
        wait_services(
            d.services,
            d.executed,
            d.transports,
            dict.fromkeys(d.nodes, d.layout),
            timeout=min(d.options.timeout, 600),
            interval=d.options.poll_interval,
            say=d.say,
            http_transport=d.options.http_transport,
        )
    return found.logged_kv_cache_line


def ready(d: Deployment) -> Outcome:
    if d.options.dry_run:
        check = f"{d.report.api_url}: /health, /v1/models lists every name, the KV line logged"
        planned = [(d.head, check)]
        planned += [(sl.node, sl.ready_url) for sl in d.services]
        return Outcome("", planned=planned)
    d.report.logged_kv_cache_line = wait_started(d, d.executed.states)
    return Outcome(f"API {d.report.api_url} serves {', '.join(d.report.served_names)}")


def proxy_key(d: Deployment) -> str | None:
    recipe = d.recipe
    if not recipe.runs_proxy:
        return None
    if recipe.proxy.master_key_file is None:
        return secrets.proxy_master_key(recipe.name).reveal()
    try:
        return d.t(d.head).get(recipe.proxy.master_key_file).decode().strip()
    except FileNotFoundError:
        return None


def contract(d: Deployment) -> Outcome:
    via = d.report.proxy_url or d.report.api_url
    if d.options.dry_run:
        names = ", ".join(d.report.served_names)
        return Outcome("", planned=[(d.head, f"a completion through {via} for {names}")])
    key = proxy_key(d)
    headers = {"Authorization": f"Bearer {key}"} if key else None
    if not d.report.proxy_url:  # straight to the engine: its own key when it requires one
        headers = secrets.engine_auth(d.recipe.name, d.recipe.engine_keyed)
    client = d.http(d.options.contract_timeout, headers)
    return Outcome(require_contract(client, via, d.report.served_names))

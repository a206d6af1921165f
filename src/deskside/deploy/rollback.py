"""Rollback after a failed start, readiness or contract: the new engines are stopped,
`current` is switched back to each node's previous release, which is started (workers
first) and waited for again. Every step runs on every node at once where the order does
not matter (stopping: the head first, then the workers; starting: the workers, then the
head). Reported, never raised past the deploy."""

from __future__ import annotations

import time

from deskside.deploy.deployment import Deployment
from deskside.deploy.stages import switch_back
from deskside.deploy.start import contract, start_waves, wait_started
from deskside.records.node import NodeState, remove_state
from deskside.runtime.ops import Executed, at_once, execute_waves
from deskside.runtime.pipeline import RollbackRecord, describe


def _stop(d: Deployment, states: dict[str, NodeState]) -> list[str]:
    """Stop the engines `states` describe: the head first, then every worker at once; the
    nodes that did not stop."""

    def stop(node: str) -> bool:
        state = states[node]
        d.say(f"stopping {state.role} {node} (release {state.release})")
        return d.controls[node].stop(d.t(node), state, d.options.grace)

    head = [n for n in d.stop_order if n == d.head and n in states]
    workers = [n for n in d.stop_order if n != d.head and n in states]
    stopped = {**at_once(head, stop), **at_once(workers, stop)}
    return [n for n in d.stop_order if n in stopped and not stopped[n]]


def rollback(d: Deployment) -> RollbackRecord:
    t0 = time.monotonic()
    d.say("rolling back")
    prev = dict(d.previous)
    left = _stop(d, dict(d.executed.states))
    # an old engine the start stage did not get to stop is restarted below
    left += _stop(d, {n: s for n, s in d.old_states.items() if s and d.old_alive.get(n)})
    switch_problems = switch_back(d, d.switched)
    d.switched = []
    stopped = time.monotonic() - t0
    if left or switch_problems:
        return RollbackRecord(
            prev,
            False,
            time.monotonic() - t0,
            "could not undo the deploy",
            "; ".join([*(f"{n}: engine did not stop" for n in left), *switch_problems]),
            stopped,
        )
    if not all(prev.get(n) for n in d.nodes):
        at_once(d.nodes, lambda n: remove_state(d.t(n), d.layout))
        d.executed = Executed()
        d.record(None, ready=False)
        return RollbackRecord(
            prev,
            True,
            time.monotonic() - t0,
            "no previous release on every node: the new one is stopped and nothing runs",
            stop_seconds=stopped,
        )
    releases = {n: r for n, r in prev.items() if r}
    d.executed = Executed()
    try:
        execute_waves(start_waves(d, releases), d.transports, d.executed, d.say)
        d.report.logged_kv_cache_line = wait_started(d, d.executed.states)
        contract(d)
    except Exception as exc:  # reported, never raised past the deploy
        d.record(next(iter(releases.values())), ready=False)
        return RollbackRecord(
            prev,
            False,
            time.monotonic() - t0,
            "the previous release did not come back",
            describe(exc),
            stopped,
        )
    d.record(releases[d.head], ready=True)
    return RollbackRecord(
        prev,
        True,
        time.monotonic() - t0,
        f"release {releases[d.head]} is READY again",
        stop_seconds=stopped,
    )

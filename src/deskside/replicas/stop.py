"""Stopping a replica set: its proxy, proven by pid, start time and run tag
(`deskside.identity`), then every group (or one) by its own runtime, head first as every
run is stopped."""

from __future__ import annotations

from deskside.errors import DesksideError
from deskside.identity import Claim, Unproven, judge, stop_command
from deskside.records.replica_set import ProxyProcess, SetRecord, remove_set
from deskside.records.run import load_run
from deskside.replicas.place import recorded_transport
from deskside.runtime.control import TableUnread, read_table
from deskside.runtime.nodes import any_running, transports_of
from deskside.runtime.select import run_runtime_of
from deskside.transport.base import Transport


def proxy_claim(proxy: ProxyProcess, what: str = "the proxy") -> Claim:
    return Claim(what, proxy.pid, proxy.pid_start, proxy.run_tag)


def proxy_alive(proxy: ProxyProcess, t: Transport | None) -> bool:
    """Whether the proxy deskside started still runs (by pid, start time and run tag; or
    alive but unproven when its record lacks one of them)."""
    if t is None:
        return False
    try:
        return judge(read_table(t), proxy_claim(proxy)).alive
    except TableUnread:
        return False


def group_running(name: str, known_hosts: str | None) -> bool:
    """Whether an engine of the group's run `name` still runs."""
    run = load_run(name)
    return run is not None and any_running(run, transports_of(run, known_hosts))


def set_running(record: SetRecord, known_hosts: str | None) -> bool:
    """Whether anything of the set still runs: an engine of a group, or its proxy."""
    return any(group_running(run, known_hosts) for run in record.group_runs()) or (
        record.proxy is not None and proxy_alive(record.proxy, recorded_transport(record))
    )


def stop_proxy(record: SetRecord, grace: float) -> str | None:
    """Stop the set's proxy, then its drain gate (the processes deskside started, by pid,
    start time and tag); `why` when one could not be stopped."""
    whys = []
    for p, what in ((record.proxy, "proxy"), (record.gate, "drain gate")):
        if p is None:
            continue
        try:
            argv = stop_command(proxy_claim(p, f"the {what}"), grace)
        except Unproven as exc:
            whys.append(exc.message)
            continue
        t = recorded_transport(record)
        if t is None:
            whys.append(
                f"{what} (pid {p.pid}): no group's record names its node {record.proxy_node}"
            )
            continue
        r = t.run(argv)
        if not r.ok:
            whys.append(f"{what} (pid {p.pid}): {r.stderr.strip() or 'still running'}")
    return "; ".join(whys) or None


def down_set(record: SetRecord, grace: float = 20.0, group: str | None = None) -> list[str]:
    """Stop the proxy and every group (or only `group`, leaving the proxy to route around
    it); returns `what: why` for each thing that could not be stopped."""
    if group is not None and group not in record.groups:
        raise DesksideError(
            f"{record.recipe_name} has no group {group!r}",
            hint=f"its groups: {', '.join(record.groups)}",
        )
    leftovers: list[str] = []
    if group is None:
        why = stop_proxy(record, grace)
        if why:
            leftovers.append(why)
    for g in [group] if group is not None else record.groups:
        run = load_run(record.group_run(g))
        if run is not None:
            stopped = run_runtime_of(run, record.known_hosts).down(run, grace)
            leftovers += [f"group {g}: {x}" for x in stopped.leftovers]
    if group is None and not leftovers:
        remove_set(record.recipe_name)
    return leftovers


__all__ = ["down_set", "proxy_alive", "proxy_claim", "set_running", "stop_proxy"]

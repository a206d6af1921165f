"""A replica set on this machine: `$DESKSIDE_HOME/runs/<set>/replica-set.json`. Its groups
are each a run of their own (with their own run record); the set adds the proxy process it
started, proven by pid, start time and run tag."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from deskside.records.node import Pid
from deskside.records.read import BadState, read_here
from deskside.records.where import set_file
from deskside.records.write import write_here

MAX_SET_BYTES = 64 * 1024


class ProxyProcess(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pid: Pid
    pid_start: int | None = None
    run_tag: str
    log: str


class SetRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    recipe: str  # the recipe file
    recipe_name: str
    runtime: Literal["local", "ssh"]
    groups: list[str]  # group names; group g runs as <recipe_name>-<g>
    proxy_url: str | None
    proxy: ProxyProcess | None = None
    gate: ProxyProcess | None = None  # the drain gate between the proxy and the groups
    proxy_node: str | None = None  # the node the proxy runs on; None: this machine
    known_hosts: str | None = None  # ssh: nodes
    started_at: str

    def group_run(self, group: str) -> str:
        return f"{self.recipe_name}-{group}"

    def group_runs(self) -> list[str]:
        """The run names of the set's groups, in the set's order."""
        return [self.group_run(g) for g in self.groups]


def _hint(name: str) -> str:
    return (
        f"nothing was signalled on its word; if {name}'s proxy and groups are gone, "
        f"remove it: rm -- {set_file(name)}"
    )


def load_set(name: str) -> SetRecord | None:
    """The set record of `name`; None when there is none; BadState for a file deskside
    cannot trust (a link, a FIFO, too large, not its JSON, another set's record)."""
    path = set_file(name)
    record = read_here(path, SetRecord, MAX_SET_BYTES, "a replica-set record", _hint(name))
    if record is not None and record.recipe_name != name:
        raise BadState(f"{path} records {record.recipe_name!r}, not {name!r}", _hint(name))
    return record


def save_set(record: SetRecord) -> None:
    write_here(set_file(record.recipe_name), record)


def remove_set(name: str) -> None:
    set_file(name).unlink(missing_ok=True)


__all__ = ["MAX_SET_BYTES", "ProxyProcess", "SetRecord", "load_set", "remove_set", "save_set"]

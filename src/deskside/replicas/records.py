"""The replica set's record on this machine: its groups (each a run of its own, with its own
record) and the proxy process the set started, proven by pid, start time and run tag."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from deskside.home import runs_dir
from deskside.runtime.records import SET_FILE, BadState, Pid, check_run_name
from deskside.transport.local import LocalTransport

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
    proxy_node: str | None = None  # the node the proxy runs on; None: this machine
    known_hosts: str | None = None  # ssh: nodes
    started_at: str

    def group_run(self, group: str) -> str:
        return f"{self.recipe_name}-{group}"


def set_file(name: str) -> Path:
    return runs_dir() / check_run_name(name) / SET_FILE


def save_set(record: SetRecord) -> None:
    data = record.model_dump_json(indent=2).encode()
    LocalTransport().put(data, str(set_file(record.recipe_name)))


def load_set(name: str) -> SetRecord | None:
    """The set record of `name`; None when there is none; BadState for a file deskside
    cannot trust (a link, too large, not its JSON)."""
    path = set_file(name)
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_SET_BYTES:
        raise BadState(
            f"{path} is not a replica-set record deskside wrote",
            hint=f"nothing was signalled on its word; remove it by hand if {name} is gone",
        )
    try:
        record = SetRecord.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        why = exc.errors()[0]["msg"]
        raise BadState(f"{path} is not a replica-set record deskside wrote: {why}") from None
    if record.recipe_name != name:
        raise BadState(f"{path} records {record.recipe_name!r}, not {name!r}")
    return record


def remove_set(name: str) -> None:
    set_file(name).unlink(missing_ok=True)


__all__ = ["ProxyProcess", "SetRecord", "load_set", "remove_set", "save_set", "set_file"]

"""What serves a recipe, or what runs: its Runtime — a replica set's
(`deskside.replicas.runtime.SetRuntime`, made of its groups' runtimes), a deploy to `ssh:`
hosts, or this machine's (`deskside.runtime.select`) — and its status (a run's, or a set's
folded from its groups')."""

from __future__ import annotations

from deskside.operate.set_status import set_status
from deskside.operate.status import Status, run_status
from deskside.recipe.types import Recipe
from deskside.records.replica_set import SetRecord
from deskside.records.run import RunRecord
from deskside.replicas.runtime import SetRuntime
from deskside.runtime.base import Runtime
from deskside.runtime.select import run_runtime_for, run_runtime_of


def runtime_for(recipe: Recipe, known_hosts: str | None = None) -> Runtime:
    if recipe.replicas is not None:
        return SetRuntime(known_hosts)
    return run_runtime_for(recipe, known_hosts)


def runtime_of(record: RunRecord | SetRecord, known_hosts: str | None = None) -> Runtime:
    if isinstance(record, SetRecord):
        return SetRuntime(known_hosts)
    return run_runtime_of(record, known_hosts)


def status_of(record: RunRecord | SetRecord, known_hosts: str | None = None) -> Status:
    if isinstance(record, SetRecord):
        return set_status(record, known_hosts)
    return run_status(record, known_hosts)


__all__ = ["runtime_for", "runtime_of", "status_of"]

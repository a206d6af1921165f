"""A replica set's Runtime: made of its groups' runtimes (`deskside.runtime.select`), each
group planned and started as a run of its own, the set's proxy in front of them
(`deskside.replicas.start`); stopped proxy first, then every group or one
(`deskside.replicas.stop`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deskside.errors import DesksideError, PlanRefused
from deskside.recipe.types import Recipe
from deskside.records.replica_set import SetRecord
from deskside.records.run import RunRecord, load_run
from deskside.replicas.plans import plan_set, set_refusal
from deskside.replicas.start import SetReport, up_set
from deskside.replicas.stop import down_set
from deskside.runtime.nodes import NodeLog
from deskside.runtime.pipeline import Progress, UpOptions
from deskside.runtime.report import Stopped
from deskside.runtime.select import run_runtime_of


@dataclass(frozen=True)
class SetStopped(Stopped):
    """What `down` did to a replica set (`group`: the one group stopped, else the whole
    set)."""

    group: str | None = None

    @property
    def what(self) -> str:
        return self.recipe + (f" group {self.group}" if self.group else "")

    def to_dict(self) -> dict[str, object]:
        return {
            "recipe": self.recipe,
            "group": self.group,
            "stopped": self.ok,
            "leftovers": list(self.leftovers),
        }


def one_set(record: RunRecord | SetRecord) -> SetRecord:
    if isinstance(record, RunRecord):
        raise DesksideError(f"{record.recipe_name} is a run, not a replica set")
    return record


class SetRuntime:
    """A recipe with `replicas:` (see the module docstring)."""

    name = "replica set"

    def __init__(self, known_hosts: str | None = None) -> None:
        self.known_hosts = known_hosts

    def up(
        self,
        recipe: Recipe,
        recipe_path: Path,
        options: UpOptions,
        progress: Progress | None = None,
    ) -> SetReport:
        """Plan every group, refuse when one does not fit (PlanRefused: nothing starts),
        then start them all and the proxy."""
        plans = plan_set(recipe, recipe_path)
        refusal = set_refusal(plans)
        if refusal is not None:
            raise PlanRefused(
                f"deskside refuses to launch: {refusal}",
                hint="lower max_model_len (see `deskside plan`) or give the KV cache more memory",
            )
        return up_set(recipe, recipe_path, plans, options, progress=progress)

    def down(
        self, record: RunRecord | SetRecord, grace: float = 20.0, group: str | None = None
    ) -> SetStopped:
        found = one_set(record)
        return SetStopped(found.recipe_name, down_set(found, grace, group), group)

    def logs(self, record: RunRecord | SetRecord, node: str | None = None) -> list[NodeLog]:
        """Every group's engine logs (or the one node's), in the set's order."""
        found = one_set(record)
        runs = [run for name in found.group_runs() if (run := load_run(name)) is not None]
        hosts = self.known_hosts or found.known_hosts
        if node is not None:
            runs = [run for run in runs if any(n.name == node for n in run.nodes)]
            if not runs:
                raise DesksideError(
                    f"no node {node!r} in a running group of {found.recipe_name}",
                    hint=f"its groups run as {', '.join(found.group_runs())}",
                )
        return [log for run in runs for log in run_runtime_of(run, hosts).logs(run, node)]


__all__ = ["SetRuntime", "SetStopped"]

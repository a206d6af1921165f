"""The Runtime interface: how a recipe's cluster is brought up, stopped and its logs read,
whatever it is made of (this machine and its network namespaces, SSH hosts, or a replica
set of such groups). A runtime plans what it starts (`UpOptions.plan` hands it a plan made
beforehand). The CLI talks to this interface only; `deskside.runtime.select` picks a run's
runtime, `deskside.operate.select` any recipe's or record's. How a running cluster is doing
(its status and verdict) is `deskside.operate`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from deskside.recipe.types import Recipe
from deskside.records.replica_set import SetRecord
from deskside.records.run import RunRecord
from deskside.runtime.nodes import NodeLog
from deskside.runtime.pipeline import Progress, UpOptions
from deskside.runtime.report import Report, Stopped


class Runtime(Protocol):
    name: str

    def up(
        self,
        recipe: Recipe,
        recipe_path: Path,
        options: UpOptions,
        progress: Progress | None = None,
    ) -> Report:
        """Plan and start the cluster (or, with `options.dry_run`, say what would be done).
        Raises DesksideError when the recipe cannot be planned; a failed step is in the
        report."""
        ...

    def down(
        self, record: RunRecord | SetRecord, grace: float = 20.0, group: str | None = None
    ) -> Stopped:
        """Stop what `record` names (a replica set: only `group`, when given); the report
        names each thing that could not be stopped."""
        ...

    def logs(self, record: RunRecord | SetRecord, node: str | None = None) -> list[NodeLog]:
        """The engine logs of the nodes (all, or `node`)."""
        ...

"""The Runtime interface: how a recipe's cluster is brought up, stopped, watched and read,
whatever its nodes are (this machine and its network namespaces, or SSH hosts). The CLI
talks to this interface only; `deskside.runtime.select` picks the implementation."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from deskside.planner.plan import Plan
from deskside.recipe.types import Recipe
from deskside.records.run import RunRecord
from deskside.runtime.pipeline import Progress, UpOptions, UpReport
from deskside.runtime.status import ClusterStatus, NodeLog


class Runtime(Protocol):
    name: str

    def up(
        self,
        recipe: Recipe,
        recipe_path: Path,
        plan: Plan,
        options: UpOptions,
        progress: Progress | None = None,
    ) -> UpReport:
        """Start the cluster (or, with `options.dry_run`, say what would be done)."""
        ...

    def down(self, run: RunRecord, grace: float = 20.0) -> list[str]:
        """Stop the run; returns `node: why` for each node where something could not be
        stopped."""
        ...

    def status(self, run: RunRecord) -> ClusterStatus: ...

    def logs(self, run: RunRecord, node: str | None = None) -> list[NodeLog]: ...

"""Which Runtime serves a run's recipe, or a run: recipes with `ssh:` nodes are deployed to
their hosts (`deskside.deploy.runtime.SshRuntime`); the others run on this machine
(`deskside.runtime.local.LocalRuntime`). A replica set's runtime, made of these, is picked
by `deskside.operate.select`."""

from __future__ import annotations

from deskside.deploy.runtime import SshRuntime
from deskside.recipe.types import Recipe
from deskside.records.run import RunRecord
from deskside.runtime.local import LocalRuntime

RunRuntime = LocalRuntime | SshRuntime


def run_runtime_for(recipe: Recipe, known_hosts: str | None = None) -> RunRuntime:
    if any(n.ssh is not None for n in recipe.cluster.nodes):
        return SshRuntime(known_hosts)
    return LocalRuntime()


def run_runtime_of(run: RunRecord, known_hosts: str | None = None) -> RunRuntime:
    return SshRuntime(known_hosts) if run.runtime == "ssh" else LocalRuntime()

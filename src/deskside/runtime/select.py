"""Which Runtime serves a recipe, or a run: recipes with `ssh:` nodes are deployed to their
hosts (`deskside.deploy.runtime.SshRuntime`); the others run on this machine
(`deskside.runtime.local.LocalRuntime`)."""

from __future__ import annotations

from deskside.deploy.runtime import SshRuntime
from deskside.recipe.types import Recipe
from deskside.records.run import RunRecord
from deskside.runtime.base import Runtime
from deskside.runtime.local import LocalRuntime


def runtime_for(recipe: Recipe, known_hosts: str | None = None) -> Runtime:
    if any(n.ssh is not None for n in recipe.cluster.nodes):
        return SshRuntime(known_hosts)
    return LocalRuntime()


def runtime_of(run: RunRecord, known_hosts: str | None = None) -> Runtime:
    return SshRuntime(known_hosts) if run.runtime == "ssh" else LocalRuntime()

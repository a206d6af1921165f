"""The runtime for `ssh:` nodes: deploy a recipe to its hosts over their Transports (SSH;
a node without `ssh:` in such a recipe is this machine, in its namespace if it has one).

Stages: preflight -> render -> diff -> push -> start -> ready -> contract (see
`deskside.deploy.stages` and `deskside.deploy.start`). A failure in start, ready or contract
rolls back to each node's previous release (`deskside.deploy.rollback`). A dry run reads
the nodes' facts, renders, diffs, and lists every operation the rest would carry out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from deskside.deploy import stages
from deskside.deploy import start as starting
from deskside.deploy.deployment import Deployment
from deskside.deploy.rollback import rollback
from deskside.engine.launch import Site, launches
from deskside.layout import NodeLayout
from deskside.planner.inputs import plan_recipe
from deskside.planner.plan import Plan
from deskside.recipe.types import Recipe
from deskside.runtime.nodes import RunCommands
from deskside.runtime.pipeline import (
    Progress,
    RollbackRecord,
    Stage,
    UpOptions,
    UpReport,
    describe,
    run_stages,
)
from deskside.runtime.transports import transport_for
from deskside.transport.base import Transport

STAGES = ("preflight", "render", "diff", "push", "start", "ready", "contract")


def proxy_url(recipe: Recipe) -> str | None:
    if not recipe.runs_proxy:
        return None
    return f"http://{recipe.head.address}:{recipe.proxy.port}"


def new_deployment(
    recipe: Recipe,
    recipe_path: Path,
    plan: Plan,
    options: UpOptions,
    transports: Mapping[str, Transport] | None,
    say: Progress,
    now: Callable[[], datetime],
) -> Deployment:
    node_launches = launches(recipe, plan, Site.deployed(recipe, recipe_path))
    head = next(la for la in node_launches if la.role == "head")
    assert head.probe_url is not None
    report = UpReport(
        recipe=recipe.name,
        runtime="ssh",
        dry_run=options.dry_run,
        api_url=head.probe_url,
        proxy_url=proxy_url(recipe),
        served_names=list(recipe.model.all_names),
        planned_kv_cache_line=plan.kv_cache_line,
    )
    chosen = dict(transports) if transports is not None else {}
    for node in recipe.cluster.nodes:
        chosen.setdefault(node.name, transport_for(node, options.known_hosts))
    return Deployment(
        recipe=recipe,
        recipe_path=recipe_path,
        plan=plan,
        options=options,
        transports=chosen,
        say=say,
        now=now,
        report=report,
        layout=NodeLayout.of(recipe),
        launches=node_launches,
    )


def pipeline(d: Deployment) -> list[Stage]:
    return [
        Stage("preflight", lambda: stages.preflight(d)),
        Stage("render", lambda: stages.render_stage(d)),
        Stage("diff", lambda: stages.diff(d)),
        Stage("push", lambda: stages.push(d)),
        Stage("start", lambda: starting.start(d), rolls_back=True),
        Stage("ready", lambda: starting.ready(d), rolls_back=True),
        Stage("contract", lambda: starting.contract(d), rolls_back=True),
    ]


def deploy(
    recipe: Recipe,
    recipe_path: Path,
    plan: Plan,
    options: UpOptions | None = None,
    *,
    transports: Mapping[str, Transport] | None = None,
    progress: Progress | None = None,
    now: Callable[[], datetime] | None = None,
) -> UpReport:
    """Run the pipeline (see the module docstring). Never raises for a failed stage: the
    report says what failed (`ok`, `failed_stage`, `error`, `rollback`)."""
    options = options or UpOptions()
    say = progress or (lambda _msg: None)
    d = new_deployment(
        recipe, recipe_path, plan, options, transports, say, now or (lambda: datetime.now(UTC))
    )

    def safe_rollback() -> RollbackRecord:
        t0 = time.monotonic()
        try:
            return rollback(d)
        except Exception as exc:  # e.g. a node became unreachable
            return RollbackRecord(
                dict(d.previous),
                False,
                time.monotonic() - t0,
                "the rollback itself failed",
                describe(exc),
            )

    ok = run_stages(
        pipeline(d),
        d.report,
        d.transports,
        d.executed,
        dry_run=options.dry_run,
        say=say,
        rollback=safe_rollback,
    )
    if ok and not options.dry_run:
        d.record(d.rid, ready=True)
        if not d.unchanged:
            stages.prune_old_releases(d)
    d.report.release = d.rid if not options.dry_run else None
    d.report.previous = dict(d.previous)
    return d.report


class SshRuntime(RunCommands):
    """Nodes reached over SSH: deployed releases, started by process, systemd or Compose."""

    name = "ssh"

    def up(
        self,
        recipe: Recipe,
        recipe_path: Path,
        options: UpOptions,
        progress: Progress | None = None,
    ) -> UpReport:
        plan = options.plan or plan_recipe(recipe, recipe_path)
        return deploy(recipe, recipe_path, plan, options, progress=progress)

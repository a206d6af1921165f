"""What the deploy stages share: the inputs, each node's Transport and Control, and what
earlier stages found (facts) or decided (the release). Stages live in
`deskside.deploy.stages` and `deskside.deploy.start`; the rollback in
`deskside.deploy.rollback`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx

from deskside.engine.launch import NodeLaunch
from deskside.engine.services import Service
from deskside.errors import DesksideError
from deskside.httpclient import METRICS, Limits
from deskside.httpclient import client as bounded_client
from deskside.layout import NodeLayout
from deskside.planner.plan import Plan
from deskside.recipe.types import Node, Recipe
from deskside.records.node import NodeState
from deskside.records.run import RunNode, RunRecord, save_run
from deskside.records.starts import StartPhases
from deskside.render import lock as lockfile
from deskside.render.bundle import Bundle
from deskside.runtime.control import Control
from deskside.runtime.ops import Executed, Op
from deskside.runtime.pipeline import Progress, UpOptions, UpReport
from deskside.transport.base import Transport

Clock = Callable[[], datetime]


class StageFailed(DesksideError):
    """A stage of the deploy pipeline could not complete."""


def iso(when: datetime) -> str:
    return when.isoformat(timespec="seconds")


@dataclass
class Deployment:
    """One deploy of a recipe (see the module docstring)."""

    recipe: Recipe
    recipe_path: Path
    plan: Plan
    options: UpOptions
    transports: dict[str, Transport]
    say: Progress
    now: Clock
    report: UpReport
    layout: NodeLayout
    launches: list[NodeLaunch]  # start order: workers first, head last
    executed: Executed = field(default_factory=Executed)
    controls: dict[str, Control] = field(default_factory=dict)
    old_states: dict[str, NodeState | None] = field(default_factory=dict)
    old_alive: dict[str, bool] = field(default_factory=dict)
    old_stops: dict[str, list[Op]] = field(default_factory=dict)  # the start stage's stops
    previous: dict[str, str | None] = field(default_factory=dict)
    bundle: Bundle | None = None
    old_lock: lockfile.Lock | None = None
    model_manifest: bytes | None = None
    model_changed: bool = True
    unchanged: bool = False
    rid: str | None = None
    switched: list[str] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)  # the start's, to wait for
    t0: float = 0.0  # the engines' start command (time.time), for the start-up phases
    spawned_at: float | None = None  # every engine process started
    startup: StartPhases | None = None  # this deploy's start-up, phase by phase

    @property
    def nodes(self) -> dict[str, Node]:
        return {n.name: n for n in self.recipe.cluster.nodes}

    @property
    def head(self) -> str:
        return self.recipe.head.name

    @property
    def start_order(self) -> list[str]:
        return [la.node for la in self.launches]

    @property
    def stop_order(self) -> list[str]:
        """Head first (no new requests), then the workers."""
        return [self.head, *[n for n in self.start_order if n != self.head]]

    def launch(self, node: str) -> NodeLaunch:
        return next(la for la in self.launches if la.node == node)

    def t(self, node: str) -> Transport:
        return self.transports[node]

    def http(self, timeout: float, headers: Mapping[str, str] | None = None) -> httpx.Client:
        limits = Limits(total=timeout, max_bytes=METRICS.max_bytes)
        return bounded_client(limits, self.options.http_transport, headers=headers)

    def fact(self, node: str, argv: Sequence[str], what: str, timeout: float = 120) -> str:
        """Run a read-only command now (dry runs too); its output, or StageFailed."""
        r = self.t(node).run(argv, timeout=timeout)
        if not r.ok:
            detail = (r.stderr or r.stdout).strip()[-400:]
            raise StageFailed(f"{node}: {what} failed (exit {r.rc}): {detail}")
        return r.stdout

    def record(self, release: str | None, ready: bool) -> None:
        """Remember the deploy on this machine, so `down`, `status` and `logs` find the
        nodes (even if this process dies during the start)."""
        recipe = self.recipe
        self.report.nodes = [s.model_dump(mode="json") for s in self.executed.states.values()]
        save_run(
            RunRecord(
                recipe=str(self.recipe_path),
                recipe_name=recipe.name,
                runtime="ssh",
                control=self.controls[self.head].kind if self.controls else "process",
                runtime_kind=recipe.runtime.kind,
                compose_program=recipe.runtime.compose,
                unit=self.layout.unit_name,
                compose_project=self.layout.compose_project,
                api_url=self.report.api_url,
                proxy_url=self.report.proxy_url,
                served_names=self.report.served_names,
                planned_kv_cache_tokens=self.plan.kv_cache_tokens,
                planned_kv_cache_line=self.plan.kv_cache_line,
                logged_kv_cache_line=self.report.logged_kv_cache_line,
                known_hosts=self.options.known_hosts,
                release=release,
                engine_overlay=self.options.engine_overlay,
                started_at=iso(self.now()),
                ready_at=iso(self.now()) if ready else None,
                startup=self.startup,
                replica_set=recipe.replica_set,
                engine_keyed=recipe.engine_keyed,
                nodes=[
                    RunNode(
                        name=la.node,
                        role=la.role,
                        node_rank=la.node_rank,
                        address=self.nodes[la.node].address,
                        ssh=self.nodes[la.node].ssh,
                        netns=self.nodes[la.node].netns,
                        recipe_dir=self.layout.recipe_dir,
                    )
                    for la in sorted(self.launches, key=lambda la: la.node_rank)
                ],
            )
        )

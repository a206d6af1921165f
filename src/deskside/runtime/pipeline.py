"""One pipeline of named stages for every runtime (SkyPilot style). A stage looks at facts
(read-only commands, HTTP checks) and returns the operations it wants done; the pipeline
hands them to the executor (`deskside.runtime.ops.execute`) — or, in a dry run, writes them
into the report's per-node transcript and goes on to the next stage as if they had been
done. Stages that need running engines (readiness, the alias contract) only describe
themselves in a dry run.

A failure stops the pipeline; the stage's own undo (e.g. switch `current` back) and, for
stages from `start` on, the runtime's rollback run; the report says which stage failed and
why. `up` never raises for a failed stage: the report carries it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import httpx

from deskside.errors import DesksideError
from deskside.planner.plan import Plan
from deskside.render.lock import HostDiff
from deskside.runtime.ops import Executed, Op, execute, execute_waves, transcript_lines
from deskside.transport.base import Transport

Progress = Callable[[str], None]


@dataclass(frozen=True)
class UpOptions:
    known_hosts: str | None = None  # SSH nodes: None means ~/.ssh/known_hosts
    dry_run: bool = False
    timeout: float = 900.0  # readiness, per start (the start, and the rollback)
    grace: float = 20.0  # seconds between SIGTERM and SIGKILL when stopping engines
    keep_releases: int = 5
    poll_interval: float = 0.5
    contract_timeout: float = 120.0
    http_transport: httpx.BaseTransport | None = None  # tests: an httpx.MockTransport
    skip_missing_services: bool = False  # local runs: an uninstalled service -> a note
    plan: Plan | None = None  # a run's plan made beforehand; None: the runtime plans
    # engine settings laid over the recipe file (already in the recipe given to `up`):
    # kept in the run's record so a restart lays them over the file again
    engine_overlay: dict[str, Any] | None = None
    start_kind: Literal["up", "upgrade"] = "up"  # how the start-up phases name this start


@dataclass
class StageRecord:
    name: str
    status: str  # ok | failed | skipped | planned (a dry run's stage)
    seconds: float
    detail: str = ""
    hosts: dict[str, float] = field(default_factory=dict)  # node -> seconds on its operations


@dataclass
class RollbackRecord:
    to_release: dict[str, str | None]
    ok: bool
    seconds: float  # in all: stopping what started, switching back, the restart
    detail: str
    error: str | None = None
    stop_seconds: float = 0.0  # stopping what started and switching `current` back


@dataclass
class UpReport:
    recipe: str
    runtime: str  # local | ssh
    dry_run: bool
    api_url: str
    proxy_url: str | None
    served_names: list[str]
    release: str | None = None
    previous: dict[str, str | None] = field(default_factory=dict)
    stages: list[StageRecord] = field(default_factory=list)
    diffs: list[HostDiff] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ok: bool = False
    failed_stage: str | None = None
    error: str | None = None
    hint: str | None = None
    exit_code: int = 0
    rollback: RollbackRecord | None = None
    logged_kv_cache_line: str | None = None
    planned_kv_cache_line: str | None = None
    seconds: float = 0.0
    nodes: list[dict[str, Any]] = field(default_factory=list)  # what was started, per node
    startup: dict[str, Any] | None = None  # the start-up phases (`deskside.runtime.phases`)
    transcript: list[dict[str, str]] = field(default_factory=list)  # the operations, in order

    def stage(self, name: str) -> StageRecord | None:
        return next((s for s in self.stages if s.name == name), None)

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["diffs"] = [d.model_dump(mode="json") for d in self.diffs]
        return data


@dataclass
class Outcome:
    """What a stage found and wants done: `ops` in order, or `waves` of them: one wave after
    the other, each node's operations of a wave in order, the nodes at once
    (`deskside.runtime.ops.execute_waves`); `ops` is then every wave's, in planned order
    (what a dry run lists)."""

    detail: str
    ops: list[Op] = field(default_factory=list)
    skipped: bool = False
    after: Callable[[Executed], None] | None = None  # once the ops are done
    undo: Callable[[Executed], None] | None = None  # when an op failed part way
    planned: list[tuple[str, str]] = field(default_factory=list)  # dry run: (node, check)
    waves: list[list[Op]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.waves:
            assert not self.ops, "an outcome has ops or waves, not both"
            self.ops = [op for wave in self.waves for op in wave]


@dataclass(frozen=True)
class Stage:
    name: str
    plan: Callable[[], Outcome]
    rolls_back: bool = False  # a failure here (or later) rolls back


def describe(exc: BaseException, hint: bool = True) -> str:
    if isinstance(exc, DesksideError):
        return exc.message + (f"\n  {exc.hint}" if hint and exc.hint else "")
    return f"{type(exc).__name__}: {exc}"


def _spent(before: Mapping[str, float], now: Mapping[str, float]) -> dict[str, float]:
    """Seconds each node spent on operations since `before` (nodes that had some)."""
    return {n: round(s - before.get(n, 0.0), 3) for n, s in now.items() if s > before.get(n, 0.0)}


def run_stages(
    stages: Sequence[Stage],
    report: UpReport,
    transports: Mapping[str, Transport],
    executed: Executed,
    *,
    dry_run: bool,
    say: Progress,
    rollback: Callable[[], RollbackRecord],
) -> bool:
    """Run `stages` in order (see the module docstring); True when every one succeeded."""
    t0 = time.monotonic()
    rolling = False
    for stage in stages:
        started = time.monotonic()
        before = dict(executed.seconds)
        rolling = rolling or stage.rolls_back
        say(stage.name)
        try:
            outcome = stage.plan()
            if dry_run:
                report.transcript += transcript_lines(stage.name, outcome.ops)
                report.transcript += [
                    {"stage": stage.name, "node": node, "what": check, "op": f"check {check}"}
                    for node, check in outcome.planned
                ]
            elif outcome.ops:
                mark = len(executed.done)
                try:
                    if outcome.waves:
                        execute_waves(outcome.waves, transports, executed, say)
                    else:
                        execute(outcome.ops, transports, executed, say)
                except BaseException:
                    if outcome.undo is not None:
                        outcome.undo(Executed(executed.done[mark:], executed.states))
                    raise
                if outcome.after is not None:
                    outcome.after(executed)
        except Exception as exc:
            report.stages.append(
                StageRecord(
                    stage.name,
                    "failed",
                    time.monotonic() - started,
                    hosts=_spent(before, executed.seconds),
                )
            )
            report.failed_stage = stage.name
            report.error = describe(exc, hint=False)
            if isinstance(exc, DesksideError):
                report.hint, report.exit_code = exc.hint, exc.exit_code
            else:
                report.exit_code = 1
            if rolling and not dry_run:
                rollback_started = time.monotonic()
                try:
                    report.rollback = rollback()
                except Exception as rb_exc:  # e.g. a node became unreachable
                    report.rollback = RollbackRecord(
                        {},
                        False,
                        time.monotonic() - rollback_started,
                        "the rollback itself failed",
                        describe(rb_exc),
                    )
            report.seconds = time.monotonic() - t0
            return False
        except BaseException:  # Ctrl-C: undo what this up started, then leave
            report.failed_stage, report.error = stage.name, "interrupted"
            if rolling and not dry_run:
                with contextlib.suppress(Exception):
                    report.rollback = rollback()
            raise
        status = "ok"
        if outcome.skipped:
            status = "skipped"
        elif dry_run and (outcome.ops or outcome.planned):
            status = "planned"
        report.stages.append(
            StageRecord(
                stage.name,
                status,
                time.monotonic() - started,
                outcome.detail,
                _spent(before, executed.seconds),
            )
        )
    report.ok = True
    report.seconds = time.monotonic() - t0
    return True

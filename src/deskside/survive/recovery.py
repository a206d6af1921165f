"""The recovery policy of `deskside watch` (recipe `survive.recover`) and its record. Pure:
the decision from the verdict, the policy and the restarts made so far; the record
(`survive.json` in the head's state folder) that `deskside status` and the exporter read.

A restart only when the cluster is WEDGED now and has been for `wedged_for` seconds. The
decision never loops: at most `max_restarts` restarts within `period` seconds, and none
within `backoff` seconds of the last one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from deskside.recipe.survive import Recover
from deskside.survive.classify import WEDGED

SURVIVE_FILE = "survive.json"
MAX_SURVIVE_BYTES = 256 * 1024
MAX_RESTARTS_KEPT = 50


class RestartRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    at: float  # epoch seconds, the watcher's clock
    reason: str  # the wedge's headline
    suspects: list[str] = Field(default_factory=list)
    bundle: str | None = None  # the diagnostic bundle written first
    ok: bool = False  # the cluster answered again afterwards
    detail: str = ""


class SurviveRecord(BaseModel):
    """What the watcher last saw and did (one file per run, rewritten at every look)."""

    model_config = ConfigDict(extra="forbid")

    recipe: str
    run_started_at: str  # the run (`deskside up`) it belongs to: another run's is ignored
    at: float  # epoch seconds of the last look
    interval: float  # seconds between looks: a record older than a few is stale
    state: str
    reasons: list[str] = Field(default_factory=list)
    suspects: list[str] = Field(default_factory=list)
    stalled_seconds: float | None = None
    wedged_since: float | None = None  # epoch seconds: WEDGED in every look since then
    recover: bool = False
    max_restarts: int = 1
    period: float = 3600.0
    restarts: list[RestartRecord] = Field(default_factory=list, max_length=MAX_RESTARTS_KEPT)
    decision: str = ""  # the last decision on a wedge, as users read it

    def recent(self, now: float) -> list[RestartRecord]:
        return [r for r in self.restarts if now - r.at < self.period]

    def exhausted(self, now: float) -> bool:
        return self.recover and len(self.recent(now)) >= self.max_restarts


@dataclass(frozen=True)
class Decision:
    action: Literal["none", "report", "restart"]
    why: str


def decide(
    state: str,
    now: float,
    policy: Recover,
    restarts: list[RestartRecord],
    wedged_since: float | None = None,
) -> Decision:
    """What to do about the cluster's state now (see the module docstring); `wedged_since`
    is when the cluster became WEDGED (None: now)."""
    if state != WEDGED:
        return Decision("none", "")
    if not policy.enabled:
        return Decision("report", "recovery is off (survive.recover.enabled): reported only")
    wedged = now - (wedged_since if wedged_since is not None else now)
    if wedged < policy.wedged_for:
        return Decision(
            "report",
            f"wedged for {wedged:.0f} s: the engines restart once it lasts "
            f"{policy.wedged_for:.0f} s (survive.recover.wedged_for)",
        )
    recent = [r for r in restarts if now - r.at < policy.period]
    if len(recent) >= policy.max_restarts:
        return Decision(
            "report",
            f"recovery budget spent: {len(recent)} restart(s) in the last "
            f"{policy.period:.0f} s (survive.recover.max_restarts {policy.max_restarts}); "
            "left for a person: `deskside diagnose`, then restart by hand",
        )
    if restarts and now - restarts[-1].at < policy.backoff:
        wait = policy.backoff - (now - restarts[-1].at)
        return Decision("report", f"backing off: the last restart was {wait:.0f} s too recent")
    return Decision("restart", "restarting the cluster's engines, workers first")


def survive_path(recipe_dir: str) -> str:
    return f"{recipe_dir.rstrip('/')}/{SURVIVE_FILE}"


def parse_survive(data: str | bytes) -> SurviveRecord | None:
    try:
        return SurviveRecord.model_validate_json(data)
    except (ValueError, RecursionError):
        return None


__all__ = [
    "Decision",
    "RestartRecord",
    "SurviveRecord",
    "decide",
    "parse_survive",
    "survive_path",
]

"""The recovery policy of `deskside watch` (recipe `survive.recover`). Pure: the decision
from the verdict, the policy and the restarts made so far (the watcher's record of them:
`deskside.records.survive`).

A restart only when the cluster is WEDGED now and has been for `wedged_for` seconds. The
decision never loops: at most `max_restarts` restarts within `period` seconds, and none
within `backoff` seconds of the last one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from deskside.recipe.survive import Recover
from deskside.records.survive import RestartRecord
from deskside.survive.classify import WEDGED


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


__all__ = ["Decision", "decide"]

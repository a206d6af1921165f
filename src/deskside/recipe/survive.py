"""The recipe's `survive` section: when a running cluster counts as wedged, and what
deskside does about it (`deskside watch`)."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from deskside.recipe.problems import Problem, raise_problems
from deskside.recipe.values import MODEL_CONFIG


class Recover(BaseModel):
    """What `deskside watch` does when it finds the cluster wedged."""

    model_config = MODEL_CONFIG

    enabled: bool = Field(
        False,
        description="Restart the cluster's engines (workers first, then the head) when it is "
        "wedged. Off: the wedge is only reported (status, the exporter, the alert).",
    )
    bundle: bool = Field(
        True,
        description="Write a diagnostic bundle (logs, stacks, metrics, process states) "
        "before restarting, so the evidence outlives the restart.",
    )
    wedged_for: float = Field(
        20,
        ge=0,
        le=3600,
        description="Seconds the cluster must stay WEDGED before the restart (a person, "
        "the alert or `deskside diagnose` sees it first; a short stall passes).",
    )
    max_restarts: int = Field(
        1,
        ge=1,
        le=20,
        description="At most this many restarts within `period` seconds; past it the wedge "
        "is reported and left for a person (never a restart loop).",
    )
    period: float = Field(
        3600, ge=60, le=7 * 86400, description="Seconds over which `max_restarts` counts."
    )
    backoff: float = Field(
        120,
        ge=0,
        le=86400,
        description="Seconds after a restart before a new wedge may trigger another one "
        "(the engines start, compile and warm up meanwhile).",
    )


class Survive(BaseModel):
    """Wedge detection: requests run but no token comes while every process is alive."""

    model_config = MODEL_CONFIG

    stall_seconds: float = Field(
        60,
        ge=5,
        le=3600,
        description="No generated token for this long while requests run (or deskside's "
        "probe waits) and every engine process is alive: the cluster is WEDGED, unless "
        "the engine still steps (a long prefill) or it is the first request (kernels "
        "compile). A rank found stopped counts after `stopped_seconds` instead.",
    )
    stopped_seconds: float = Field(
        10,
        ge=1,
        le=3600,
        description="No token for this long while requests run and an engine rank is "
        "stopped (state T, e.g. SIGSTOP or a debugger): WEDGED.",
    )
    interval: float = Field(
        5, ge=0.5, le=300, description="Seconds between the looks of `deskside watch`."
    )
    watch: bool = Field(
        True,
        description="A run on this machine starts `deskside watch` beside its head (the "
        "looks `deskside status` reads, the exporter's cluster state, the recovery). "
        "Deployed nodes: run `deskside watch` where you run deskside.",
    )
    recover: Recover = Field(default_factory=Recover, description="What to do on a wedge.")

    @model_validator(mode="after")
    def _rules(self) -> Survive:
        if self.interval * 2 > self.stall_seconds:
            raise_problems(
                [
                    Problem(
                        ("interval",),
                        f"survive.interval {self.interval:g} s is over half of "
                        f"survive.stall_seconds {self.stall_seconds:g} s",
                        "look at least twice per stall, e.g. interval: 5 with stall_seconds: 60",
                    )
                ]
            )
        return self


__all__ = ["Recover", "Survive"]

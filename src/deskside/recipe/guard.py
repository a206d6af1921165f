"""The recipe's run-time safety limits (`guard:`): memory headroom, KV cache usage, draft
acceptance, and whether the guard stops the engine. Import it from `deskside.recipe.types`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from deskside.recipe.problems import Problem, raise_problems
from deskside.recipe.values import MODEL_CONFIG, ByteSize


class Guard(BaseModel):
    """Run-time safety limits."""

    model_config = MODEL_CONFIG

    min_headroom: ByteSize | None = Field(
        None,
        description="Least memory left outside vLLM on a node (e.g. '21GiB'); overrides the "
        "hardware profile's safety floor.",
    )
    kv_usage_warn: float = Field(
        0.9, gt=0, le=1, description="Warn when KV cache usage passes this fraction."
    )
    min_spec_acceptance: float = Field(
        0.3,
        ge=0,
        le=1,
        description="Warn when the speculative draft acceptance rate falls below this.",
    )
    enforce: bool = Field(
        False,
        description="Stop the node's engine when the memory available on a node stays under "
        "the safety floor for `window` seconds, before the host runs out (on unified-memory "
        "hosts such as GB10 that freezes it). Available memory is MemAvailable, or the "
        "node's memory cgroup headroom when a limit applies and that is smaller. The stop "
        "is the one `deskside down` makes (graceful first); its reason shows in `deskside "
        "status`. deskside's exporter watches (monitoring.enabled), or `deskside guard`. "
        "False: the MemoryBelowFloor alert only warns.",
    )
    window: float = Field(
        30,
        ge=1,
        le=3600,
        description="Seconds available memory must stay under the floor before the guard "
        "stops the engine; any sample back over the floor starts the count again.",
    )
    interval: float = Field(
        2,
        ge=0.1,
        le=60,
        description="Seconds between the guard's memory samples (at most `window`).",
    )

    @model_validator(mode="after")
    def _rules(self) -> Guard:
        if self.interval > self.window:
            raise_problems(
                [
                    Problem(
                        ("interval",),
                        f"guard.interval {self.interval:g} s is longer than guard.window "
                        f"{self.window:g} s",
                        "sample several times per window, e.g. interval: 2 with window: 30",
                    )
                ]
            )
        return self


__all__ = ["Guard"]

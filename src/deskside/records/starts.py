"""The run's start-ups: `$DESKSIDE_HOME/runs/<recipe>/starts.jsonl`, one JSON object a line,
appended by every `up`, engine restart and upgrade (`deskside.runtime.phases`). `down` keeps
the series, so the next start of the same lock is compared with the last one.

Written and read the way the series of looks is (`deskside.records.looks`): appends under
an exclusive lock, never through a link; a line that is not a start reads as absent.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deskside.records.looks import append_line, object_lines
from deskside.records.where import starts_file

StartKind = Literal["up", "restart", "upgrade"]


class StartPhases(BaseModel):
    """One start-up, phase by phase: seconds from the start command to each phase
    (`deskside.runtime.phases.PHASES`); a phase not observed is absent."""

    model_config = ConfigDict(extra="forbid")

    kind: StartKind
    lock: str = Field(description="what was started: the same lock starts the same engines")
    started_at: str
    seconds: dict[str, float]
    previous: dict[str, float] | None = Field(
        None, description="the previous start of the same lock, phase by phase"
    )
    regressions: list[str] = Field(default_factory=list)


def append_start(recipe_name: str, start: StartPhases) -> None:
    append_line(starts_file(recipe_name), start.model_dump_json())


def read_starts(recipe_name: str) -> list[StartPhases]:
    """The run's start-ups, oldest first (lines that are not a start are left out)."""
    out = []
    for line in object_lines(starts_file(recipe_name)):
        try:
            out.append(StartPhases.model_validate(json.loads(line)))
        except (ValueError, ValidationError):
            continue
    return out


def last_start(recipe_name: str, lock: str | None = None) -> StartPhases | None:
    """The newest start-up (of `lock` when given)."""
    found = [s for s in read_starts(recipe_name) if lock is None or s.lock == lock]
    return found[-1] if found else None


__all__ = ["StartKind", "StartPhases", "append_start", "last_start", "read_starts"]

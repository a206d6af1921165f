"""Why the guard stopped a node's engine: `guard.json` in the node's state folder (beside
`state.json`), written by the guard when it acts and read by `deskside status`. Pure: the
record, its file name and the reason as users read it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from deskside.units import format_bytes

GUARD_FILE = "guard.json"
MAX_GUARD_BYTES = 16 * 1024


class GuardRecord(BaseModel):
    """One stop by the guard."""

    model_config = ConfigDict(extra="forbid")

    recipe: str
    node: str
    at: str  # when the guard acted (UTC, ISO 8601)
    source: str  # what ran low: "MemAvailable" or "memory cgroup <folder>"
    available_bytes: int
    floor_bytes: int
    window_seconds: float
    low_seconds: float
    run_started_at: str  # started_at of the node state it stopped (matches one start only)
    stopped: str  # what was stopped: "process 1234", "unit deskside-x.service", ...
    how: str  # the stop command, as users read it
    ok: bool  # the stop command succeeded

    def reason(self) -> str:
        """`stopped by guard: MemAvailable 3.10 GiB below the floor 5.00 GiB for 30 s at T`."""
        text = (
            f"stopped by guard: {self.source} {format_bytes(self.available_bytes)} below the "
            f"floor {format_bytes(self.floor_bytes)} for {self.low_seconds:.0f} s at {self.at}"
        )
        return text if self.ok else text + " (the stop command failed)"


def guard_path(recipe_dir: str) -> str:
    return f"{recipe_dir.rstrip('/')}/{GUARD_FILE}"


def parse_record(data: str | bytes) -> GuardRecord | None:
    """A guard record, or None when the text is not one."""
    try:
        return GuardRecord.model_validate_json(data)
    except (ValueError, RecursionError):
        return None

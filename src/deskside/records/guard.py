"""Why the guard stopped a node's engine: `guard.json` in the node's state folder (beside
`state.json`), written by the guard when it acts and read by `deskside status`
(`deskside.records.node_files`). Pure: the record and the reason as users read it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from deskside.units import format_bytes

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


__all__ = ["MAX_GUARD_BYTES", "GuardRecord"]

"""What `deskside watch` last saw and did: `survive.json` in the head's state folder,
rewritten at every look, read by `deskside status` and the head's exporter
(`deskside.records.node_files`). Pure: the records only."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

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


__all__ = ["MAX_RESTARTS_KEPT", "MAX_SURVIVE_BYTES", "RestartRecord", "SurviveRecord"]

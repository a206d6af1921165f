"""Looks at a running cluster, kept as a series: one look = the head's metric sample and
every node's engine processes at one moment. `deskside status` and `deskside watch` append
their looks to the run's series and classify the whole of it. Pure: JSON in and out.
Which processes compute (engine cores and worker ranks, by the titles vLLM gives them) is
decided when a look is taken (`deskside.facts.procs.computes`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from deskside.survive.classify import Observations
from deskside.survive.observe import EngineSample, ProcessSample

KEEP_SECONDS = 3600.0  # looks older than this are dropped from the series


@dataclass(frozen=True)
class Look:
    at: float
    run_started_at: str  # the start this look belongs to (a new start, a new series)
    engine: EngineSample | None = None
    processes: tuple[ProcessSample, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


def parse_look(line: str) -> Look | None:
    """One line of the series; None for a line that is not a look (a torn write)."""
    try:
        raw = json.loads(line)
        engine = EngineSample(**raw["engine"]) if raw.get("engine") else None
        procs = tuple(ProcessSample(**p) for p in raw.get("processes", ()))
        return Look(float(raw["at"]), str(raw["run_started_at"]), engine, procs)
    except (ValueError, TypeError, KeyError):
        return None


def series(lines: Iterable[str], run_started_at: str, now: float) -> list[Look]:
    """The run's looks of the last KEEP_SECONDS, oldest first."""
    looks = [parse_look(line) for line in lines if line.strip()]
    return sorted(
        (
            look
            for look in looks
            if look is not None
            and look.run_started_at == run_started_at
            and now - KEEP_SECONDS <= look.at <= now + 5
        ),
        key=lambda look: look.at,
    )


def observations(looks: Sequence[Look], now: float, ever_ready: bool) -> Observations:
    """The series as the classifier reads it. Only processes the newest look still saw
    count (one that left meanwhile is not a suspect: the nodes' state says it exited)."""
    current = {(p.node, p.pid) for p in looks[-1].processes} if looks else set()
    return Observations(
        now=now,
        engine=tuple(look.engine for look in looks if look.engine is not None),
        processes=tuple(p for look in looks for p in look.processes if (p.node, p.pid) in current),
        ever_ready=ever_ready,
    )


__all__ = ["KEEP_SECONDS", "Look", "observations", "parse_look", "series"]

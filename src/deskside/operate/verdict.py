"""The wedge verdict in `deskside status`: node states decide DOWN and DEGRADED as
before; for a cluster they call READY, the series of looks (`deskside.operate.looks`) can
say WEDGED (no token while requests run) or DEGRADED (idle with a rank stopped)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx

from deskside.errors import DesksideError
from deskside.operate.looks import judge
from deskside.records.node import NodeState, read_state
from deskside.records.node_files import read_survive as read_survive_file
from deskside.records.node_files import write_survive as write_survive_file
from deskside.records.read import BadState
from deskside.records.run import RunNode, RunRecord
from deskside.records.survive import SurviveRecord
from deskside.runtime.control import Control
from deskside.survive.classify import DEGRADED, WEDGED
from deskside.transport.base import Transport

if TYPE_CHECKING:
    from deskside.recipe.survive import Survive


def node_controls(
    run: RunRecord, transports: Mapping[str, Transport], controls: Mapping[str, Control]
) -> dict[str, tuple[Transport, Control, NodeState | None]]:
    out: dict[str, tuple[Transport, Control, NodeState | None]] = {}
    for n in run.nodes:
        t = transports[n.name]
        try:
            state = read_state(t, run.layout(n), run.recipe_name)
        except DesksideError:
            state = None
        out[n.name] = (t, controls[n.name], state)
    return out


def with_verdict(
    cluster: str,
    reasons: list[str],
    run: RunRecord,
    client: httpx.Client,
    nodes: Mapping[str, tuple[Transport, Control, NodeState | None]],
    survive: Survive | None,
) -> dict[str, Any]:
    """The status fields the series of looks changes, for a cluster the node states call
    `cluster` (only READY is refined)."""
    if cluster != "READY":
        return {}
    verdict, _ = judge(run, client, nodes, survive)
    return {
        "cluster": verdict.state if verdict.state in (WEDGED, DEGRADED) else cluster,
        "reasons": [*reasons, *verdict.reasons],
        "suspects": list(verdict.suspects),
        "stalled_seconds": verdict.stalled_seconds,
    }


def head_of(run: RunRecord) -> RunNode:
    return next(n for n in run.nodes if n.role == "head")


def read_survive(run: RunRecord, t: Transport) -> SurviveRecord | None:
    """What the watcher last saw and did (None: nothing, or a record deskside cannot
    read, which the watcher's next look replaces)."""
    try:
        return read_survive_file(t, head_of(run).recipe_dir)
    except BadState:
        return None


def write_survive(run: RunRecord, t: Transport, record: SurviveRecord) -> None:
    write_survive_file(t, head_of(run).recipe_dir, record)


def with_recovery(cluster: str, reasons: list[str], run: RunRecord, t: Transport) -> dict[str, Any]:
    """The status fields of what the watcher last saw and did (its recovery record), when
    one ran for this run."""
    record = read_survive(run, t)
    if record is None or record.run_started_at != run.started_at:
        return {}
    now = time.time()
    summary: dict[str, object] = {
        "watched_seconds_ago": round(max(0.0, now - record.at), 1),
        "enabled": record.recover,
        "restarts": [r.model_dump(mode="json") for r in record.restarts],
        "restarts_in_period": len(record.recent(now)),
        "max_restarts": record.max_restarts,
        "period_seconds": record.period,
        "budget_exhausted": record.exhausted(now),
    }
    more = [record.decision] if record.decision and cluster == WEDGED else []
    return {"recovery": summary, "reasons": [*reasons, *more]}


__all__ = [
    "head_of",
    "node_controls",
    "read_survive",
    "with_recovery",
    "with_verdict",
    "write_survive",
]

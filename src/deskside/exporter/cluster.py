"""The cluster verdict on the head's exporter: what `deskside watch` last saw and did
(`survive.json` in the head's state folder), as series. Absent when no watcher wrote."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from deskside.exporter import series
from deskside.records.node_files import read_survive_here
from deskside.records.read import BadState
from deskside.records.survive import SurviveRecord
from deskside.survive.classify import DEGRADED, DOWN, READY, STARTING, WEDGED

STATES = (READY, STARTING, DEGRADED, WEDGED, DOWN)


def read_record(state_dir: Path) -> SurviveRecord | None:
    """What the watcher last wrote; None when nothing did or it cannot be trusted."""
    try:
        return read_survive_here(state_dir)
    except BadState:
        return None


def cluster_series(node: str, record: SurviveRecord, now: float | None = None) -> Iterator[Metric]:
    now = time.time() if now is None else now
    n = [node]
    state = GaugeMetricFamily(
        series.CLUSTER_STATE,
        "1 for the cluster's state as `deskside watch` last classified it (READY, STARTING, "
        "DEGRADED, WEDGED, DOWN), 0 for the others.",
        labels=["node", "state"],
    )
    for s in STATES:
        state.add_metric([node, s], 1 if record.state == s else 0)
    age = GaugeMetricFamily(
        series.CLUSTER_LOOK_AGE,
        "Seconds since `deskside watch` last looked (a stale verdict when it grows).",
        labels=["node"],
    )
    age.add_metric(n, max(0.0, now - record.at))
    stalled = GaugeMetricFamily(
        series.CLUSTER_STALLED,
        "Seconds without a generated token while requests ran, at the last look (0: none).",
        labels=["node"],
    )
    stalled.add_metric(n, record.stalled_seconds or 0.0)
    restarts = CounterMetricFamily(
        series.RECOVERY_RESTARTS,
        "Restarts the recovery policy made (kept in survive.json).",
        labels=["node"],
    )
    restarts.add_metric(n, len(record.restarts))
    spent = GaugeMetricFamily(
        series.RECOVERY_EXHAUSTED,
        "1: the recovery budget (survive.recover.max_restarts per period) is spent.",
        labels=["node"],
    )
    spent.add_metric(n, 1 if record.exhausted(now) else 0)
    yield from (state, age, stalled, restarts, spent)


__all__ = ["cluster_series", "read_record"]

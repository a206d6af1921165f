"""The recovery decision and its record: restart only a lasting wedge, within the budget
and after the backoff; never for another state."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from deskside.exporter.cluster import cluster_series
from deskside.recipe.survive import Recover
from deskside.records.node_files import read_survive_here
from deskside.records.read import BadState
from deskside.records.survive import RestartRecord, SurviveRecord
from deskside.records.where import survive_file
from deskside.records.write import record_bytes
from deskside.survive.classify import DEGRADED, READY, WEDGED
from deskside.survive.recovery import decide

ON = Recover(enabled=True, wedged_for=20, max_restarts=2, period=3600, backoff=300)


def restart(at: float) -> RestartRecord:
    return RestartRecord(at=at, reason="wedged", ok=True)


def test_only_a_wedge_is_acted_on() -> None:
    for state in (READY, DEGRADED, "STARTING", "DOWN"):
        assert decide(state, 1000, ON, [], wedged_since=0).action == "none"


def test_off_reports_only() -> None:
    d = decide(WEDGED, 1000, Recover(enabled=False), [], wedged_since=0)
    assert d.action == "report" and "recovery is off" in d.why


def test_a_wedge_must_last_wedged_for() -> None:
    assert decide(WEDGED, 1000, ON, [], wedged_since=990).action == "report"
    assert "wedged for 10 s" in decide(WEDGED, 1000, ON, [], wedged_since=990).why
    assert decide(WEDGED, 1000, ON, [], wedged_since=980).action == "restart"
    assert decide(WEDGED, 1000, ON, [], wedged_since=None).action == "report"  # just now


def test_backoff_after_a_restart() -> None:
    d = decide(WEDGED, 1000, ON, [restart(900)], wedged_since=0)
    assert d.action == "report" and "backing off" in d.why and "200 s" in d.why
    assert decide(WEDGED, 1300, ON, [restart(900)], wedged_since=0).action == "restart"


def test_the_budget_stops_a_loop() -> None:
    spent = [restart(100), restart(500)]
    d = decide(WEDGED, 1000, ON, spent, wedged_since=0)
    assert d.action == "report" and "budget spent: 2 restart(s)" in d.why
    # restarts older than the period no longer count
    assert decide(WEDGED, 4200, ON, spent, wedged_since=0).action == "restart"


def test_record_round_trip_and_exporter_series(tmp_path: Path) -> None:
    record = SurviveRecord(
        recipe="r",
        run_started_at="2026-01-01T00:00:00+00:00",
        at=1000.0,
        interval=5,
        state=WEDGED,
        stalled_seconds=42.0,
        recover=True,
        max_restarts=1,
        restarts=[restart(900)],
    )
    path = Path(survive_file(str(tmp_path)))
    assert read_survive_here(tmp_path) is None
    path.write_bytes(record_bytes(record))
    again = read_survive_here(tmp_path)
    assert again == record and again.exhausted(1000.0) and not again.exhausted(4600.0)
    path.write_text("{not json")
    with pytest.raises(BadState, match=r"survive\.json is not a watcher record deskside wrote"):
        read_survive_here(tmp_path)
    registry = CollectorRegistry(auto_describe=False)

    class One:
        def collect(self):  # type: ignore[no-untyped-def]
            return cluster_series("node0", record, now=1003.0)

    registry.register(One())  # type: ignore[arg-type]
    from prometheus_client import generate_latest

    values = {
        (s.name, s.labels.get("state", "")): s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
    }
    assert values[("deskside_cluster_state", WEDGED)] == 1
    assert values[("deskside_cluster_state", READY)] == 0
    assert values[("deskside_cluster_look_age_seconds", "")] == 3
    assert values[("deskside_cluster_stalled_seconds", "")] == 42
    assert values[("deskside_recovery_restarts_total", "")] == 1
    assert values[("deskside_recovery_budget_exhausted", "")] == 1

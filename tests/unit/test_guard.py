"""The guard: the pure decision, the stop command per kind of control, the record, one loop
step with a scripted transport and clock, and the exporter serving what the guard compares
(the memory it reads: `test_facts_memory`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from deskside.facts.procs import PROCESS_IDS
from deskside.guard.act import GRACE_SECONDS, engine_stop, node_control
from deskside.guard.decide import Decision, decide
from deskside.guard.watch import Guardian
from deskside.layout import NodeLayout
from deskside.recipe.types import Guard, Recipe
from deskside.records.guard import GuardRecord
from deskside.records.node import NodeState, state_bytes
from deskside.records.read import NODE_READ_SH, BadState, parse
from deskside.records.where import guard_file
from deskside.records.write import record_bytes
from deskside.runtime import node_sh
from deskside.transport.base import Result
from deskside.transport.fake import FakeTransport

from .exporter_cases import FLAGSHIP
from .proc_tables import table_text, tagged


def decide_all(
    samples: Iterable[tuple[float, int | None]], floor: int, window: float
) -> list[Decision]:
    """`decide` over a series of samples, in order, as the guard's loop calls it."""
    out = []
    since: float | None = None
    for now, available in samples:
        d = decide(since, now, available, floor, window)
        since = d.low_since
        out.append(d)
    return out


CGROUP = Path(__file__).parent / "fixtures" / "cgroup"
GIB = 1 << 30

# -- decide


def test_low_for_the_window_acts_once_and_recovery_resets() -> None:
    floor, window = 100, 10.0
    samples: list[tuple[float, int | None]] = [
        (0, 150),
        (2, 90),  # low since 2
        (6, 80),
        (11, 95),  # 9 s low: not yet
        (12, 99),  # 10 s: act
        (14, 90),  # the count starts again after an action
        (20, 90),
    ]
    verdicts = [d.verdict for d in decide_all(samples, floor, window)]
    assert verdicts == ["ok", "low", "low", "low", "act", "low", "low"]
    d = decide_all(samples, floor, window)
    assert d[4].low_seconds == 10 and d[4].low_since is None
    assert d[3].low_since == 2 and d[3].low_seconds == 9


def test_one_sample_over_the_floor_restarts_the_count() -> None:
    samples: list[tuple[float, int | None]] = [(0, 50), (8, 50), (9, 100), (10, 50), (19, 50)]
    assert [d.verdict for d in decide_all(samples, 100, 10.0)] == [
        "low",
        "low",
        "ok",  # at the floor is not under it
        "low",
        "low",
    ]


def test_an_unreadable_sample_never_acts_and_restarts_the_count() -> None:
    samples: list[tuple[float, int | None]] = [(0, 50), (5, None), (12, 50), (21, 50)]
    assert [d.verdict for d in decide_all(samples, 100, 10.0)] == ["low", "unknown", "low", "low"]
    assert decide(None, 5.0, None, 100, 1.0).verdict == "unknown"


# -- the recipe


def test_guard_fields_default_off_and_check_interval_against_window() -> None:
    g = Guard()
    assert (g.enforce, g.window, g.interval) == (False, 30, 2)
    with pytest.raises(ValueError, match=r"guard.interval 40 s is longer than guard.window"):
        Guard(window=30, interval=40)


# -- the stop


def _state(control: str, pid: int | None = 4321) -> NodeState:
    return NodeState(
        recipe="r",
        node="node0",
        role="head",
        node_rank=0,
        release=None,
        control=control,  # type: ignore[arg-type]
        pid=pid,
        pid_start=99 if pid else None,
        run_tag="r/node0/20260101000000/engine" if pid else None,
        log="/srv/r/logs/e.log" if pid else None,
        started_at="2026-01-01T00:00:00+00:00",
    )


def _recipe() -> Recipe:
    from deskside.recipe.load import load_recipe

    return load_recipe(FLAGSHIP)


def test_the_stop_is_deskside_s_own_for_each_control() -> None:
    recipe, layout = _recipe(), NodeLayout.at("/srv/r", "r")
    process = engine_stop(node_control(recipe, layout, _state("process"), False), _state("process"))
    assert process is not None and process.what == "process 4321"
    assert process.argv == node_sh.stop_session(
        4321, GRACE_SECONDS, 99, "r/node0/20260101000000/engine"
    )
    unit = engine_stop(node_control(recipe, layout, _state("systemd"), True), _state("systemd"))
    assert unit is not None and unit.argv == ["systemctl", "stop", "deskside-r.service"]
    sudo = engine_stop(node_control(recipe, layout, _state("systemd"), False), _state("systemd"))
    assert sudo is not None and sudo.argv[:3] == ["sudo", "-n", "systemctl"]
    compose = engine_stop(node_control(recipe, layout, _state("compose"), True), _state("compose"))
    assert compose is not None and compose.argv[-3:] == ["stop", "--timeout", "20"]
    assert "/srv/r/current/compose.yaml" in compose.argv
    bare = _state("process", pid=None)
    assert engine_stop(node_control(recipe, layout, bare, False), bare) is None


def test_the_record_reads_as_a_reason() -> None:
    record = GuardRecord(
        recipe="r",
        node="node0",
        at="2026-01-01T00:00:30+00:00",
        source="MemAvailable",
        available_bytes=int(3.1 * GIB),
        floor_bytes=5 * GIB,
        window_seconds=30,
        low_seconds=30.4,
        run_started_at="2026-01-01T00:00:00+00:00",
        stopped="unit deskside-r.service",
        how="systemctl stop deskside-r.service",
        ok=True,
    )
    assert record.reason() == (
        "stopped by guard: MemAvailable 3.10 GiB below the floor 5.00 GiB for 30 s at "
        "2026-01-01T00:00:30+00:00"
    )
    assert parse(record_bytes(record), GuardRecord, "guard.json", "a guard record") == record
    for bad in ("{}", "not json"):
        with pytest.raises(BadState, match=r"guard\.json is not a guard record deskside wrote"):
            parse(bad, GuardRecord, "guard.json", "a guard record")
    assert guard_file("/srv/r/") == "/srv/r/guard.json"


# -- one loop step


def _scripted(state: NodeState, alive: bool) -> FakeTransport:
    def answer(argv: Sequence[str]) -> Result:
        if len(argv) > 2 and argv[2] == NODE_READ_SH:
            return Result(0, state_bytes(state).decode(), "")
        if len(argv) > 2 and argv[2] == PROCESS_IDS.script:
            engine = [tagged(4321, state.run_tag or "", start=99)] if alive else []
            return Result(0, table_text(engine), "")
        return Result(0, "", "")

    return FakeTransport(default=answer)


def _guardian(tmp_path: Path, t: FakeTransport, available_kib: int) -> tuple[Guardian, list[float]]:
    (tmp_path / "meminfo").write_text(f"MemTotal: 134217728 kB\nMemAvailable: {available_kib} kB\n")
    recipe = _recipe().model_copy(
        update={"guard": Guard(enforce=True, window=10, interval=1, min_headroom=5 * GIB)}
    )
    now = [0.0]
    guardian = Guardian(
        recipe=recipe,
        node="spark-1",
        floor=5 * GIB,
        layout=NodeLayout.at("/srv/r", recipe.name),
        proc_root=tmp_path,
        cgroup=None,
        transport=t,
        clock=lambda: now[0],
    )
    return guardian, now


def test_a_step_past_the_window_stops_the_engine_and_records_why(tmp_path: Path) -> None:
    state = _state("process")
    t = _scripted(state, alive=True)
    guardian, now = _guardian(tmp_path, t, 3 * 1024 * 1024)  # 3 GiB available
    stopped: list[GuardRecord] = []
    guardian.on_stop = stopped.append
    for second in (0, 5, 9.9):
        now[0] = second
        assert guardian.step().verdict == "low"
    assert guardian.low_seconds() == pytest.approx(9.9)
    now[0] = 10
    assert guardian.step().verdict == "act"
    assert guardian.stops == 1 and len(stopped) == 1
    ran = [c[1] for c in t.calls if c[0] == "run"]
    assert node_sh.stop_session(4321, GRACE_SECONDS, 99, state.run_tag) in [list(a) for a in ran]
    record = GuardRecord.model_validate_json(t.files["/srv/r/guard.json"])
    assert record == stopped[0]
    assert record.run_started_at == state.started_at and record.available_bytes == 3 * GIB


def test_no_stop_when_the_engine_is_already_gone(tmp_path: Path) -> None:
    t = _scripted(_state("process"), alive=False)
    guardian, now = _guardian(tmp_path, t, 3 * 1024 * 1024)
    for second in (0, 10):
        now[0] = second
        guardian.step()
    assert guardian.stops == 0 and "/srv/r/guard.json" not in t.files
    assert not any(c[1][2:3] == (node_sh.STOP_SESSION_SH,) for c in t.calls)


# -- the exporter's guard series


def test_the_exporter_serves_what_the_guard_compares(tmp_path: Path) -> None:
    from prometheus_client import generate_latest

    from deskside.exporter import series
    from deskside.exporter.collect import Sources, registry_for

    from .exporter_cases import PROC, parse

    recipe = _recipe()
    me = recipe.head
    proc = PROC / "gb10-head"
    leaf = CGROUP / "v2/sys/fs/cgroup/machine.slice/node0"
    headroom = 2147483648 - (1900000000 - 200000000)  # the recorded machine.slice
    guardian, _ = _guardian(tmp_path, _scripted(_state("process"), alive=True), 1024)
    for cgroup, want, guarded in ((leaf, headroom, None), (None, None, guardian)):
        sources = Sources(
            recipe=recipe,
            recipe_path=FLAGSHIP,
            node=me,
            proc_root=proc,
            once=True,
            cgroup=cgroup,
            guardian=guarded,
        )
        samples = parse(generate_latest(registry_for(sources)[0]).decode())
        available = samples[series.GUARD_AVAILABLE][0][1]
        mem = samples[series.MEMORY_AVAILABLE][0][1]
        assert available == (min(mem, want) if want is not None else mem)
        if guarded is None:
            assert series.GUARD_STOPS not in samples and series.GUARD_LOW_SECONDS not in samples
        else:
            assert samples[series.GUARD_WINDOW][0][1] == 10
            assert samples[series.GUARD_LOW_SECONDS][0][1] == 0
            assert samples[series.GUARD_STOPS][0][1] == 0

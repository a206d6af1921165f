"""The guard on a real memory cgroup (v1) of this machine: an engine-like process and a
memory hog share a cgroup limited to 600 MiB; the hog takes it to within 200 MiB (the floor)
of the limit. `deskside guard` (a subprocess pointed at that cgroup) must stop the engine
gracefully through deskside's own stop (pid + start time + run tag from the node's state),
not before the window, record why, and `deskside status --json` must show it.

The test creates, signals and removes only its own cgroup and its own child processes."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deskside.facts.procs import RUN_TAG, parse_stat
from deskside.layout import NodeLayout
from deskside.records.node import write_state
from deskside.records.run import save_run
from deskside.records.where import run_file
from deskside.runtime.control import run_tag
from deskside.transport.local import LocalTransport

from ..cli_process import ROOT, deskside
from ..monitor_stub import node_state, run_record

pytestmark = pytest.mark.integration

MIB = 1 << 20
CGROUP_V1 = Path("/sys/fs/cgroup/memory")
LIMIT = 600 * MIB
FLOOR = 200 * MIB
HOLD = 450 * MIB  # the hog's allocation: the cgroup's headroom falls under the floor
WINDOW = 2.5
NAME = "guardtest"

RECIPE = f"""\
version: 1
name: {NAME}
cluster:
  nodes:
    - name: node0
      address: 127.0.0.1
      role: head
      hardware: cpu
      gpus: 1
model:
  path: /nonexistent/model
  served_name: tiny
engine:
  vllm_version: "0.32.0"
  device: cpu
  kv_cache_memory: 1GiB
runtime:
  kind: native
guard:
  enforce: true
  min_headroom: {FLOOR}
  window: {WINDOW}
  interval: 0.5
"""

# An engine stand-in: on SIGTERM it writes the marker and exits 0.
ENGINE = """\
import signal, sys, time
def term(signum, frame):
    with open(sys.argv[1], "w") as f:
        f.write(repr(time.time()))
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""

# Allocates (and touches) `total` bytes in 25 MiB steps, says when it holds them, holds.
HOG = """\
import sys, time
total, step, chunks = int(sys.argv[1]), 25 << 20, []
while len(chunks) * step < total:
    chunks.append(b"\\x01" * step)
    time.sleep(0.02)
print(repr(time.time()), flush=True)
while True:
    time.sleep(1)
"""


@pytest.fixture
def cgroup() -> Iterator[Path]:
    if not (CGROUP_V1 / "memory.limit_in_bytes").is_file():
        pytest.skip("no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory")
    path = CGROUP_V1 / f"deskside-guard-test-{os.getpid()}"
    try:
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(LIMIT))
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.rmdir()
        pytest.skip(f"cannot make a memory cgroup under {CGROUP_V1}: {exc.strerror}")
    try:
        yield path
    finally:
        for _ in range(50):  # its processes are gone; the kernel lets go of it shortly
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def _into(cg: Path) -> None:
    """preexec_fn: the child joins the cgroup before it runs anything."""
    (cg / "cgroup.procs").write_text(str(os.getpid()))


def _start_ticks(pid: int) -> int:
    parsed = parse_stat(Path(f"/proc/{pid}/stat").read_text())
    assert parsed is not None
    return parsed.start_ticks


def test_guard_stops_the_engine_in_a_cgroup_under_the_floor(
    cgroup: Path, tmp_path: Path, session_home: Path
) -> None:
    recipe = tmp_path / "guardtest.yaml"
    recipe.write_text(RECIPE)
    marker = tmp_path / "engine-stopped"
    api = "http://127.0.0.1:9"  # nothing answers: status reads the nodes' states
    record = run_record(NAME, api)
    layout = NodeLayout.at(record.nodes[0].recipe_dir, NAME)
    Path(layout.logs).mkdir(parents=True, exist_ok=True)
    state = node_state(NAME, log=f"{layout.logs}/engine.log")
    tag = run_tag(state, "engine")
    env = {**os.environ, RUN_TAG: tag}
    started: list[subprocess.Popen[bytes]] = []
    try:
        with open(f"{layout.logs}/engine.log", "wb") as log:
            engine = subprocess.Popen(
                [sys.executable, "-c", ENGINE, str(marker)],
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,  # its own session, as deskside spawns engines
                preexec_fn=lambda: _into(cgroup),
            )
        started.append(engine)
        state = state.model_copy(
            update={"pid": engine.pid, "pid_start": _start_ticks(engine.pid), "run_tag": tag}
        )
        write_state(LocalTransport(), layout, state)
        save_run(record)

        guard = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "deskside.cli",
                "guard",
                str(recipe),
                "--node",
                "node0",
                "--state-dir",
                layout.recipe_dir,
                "--cgroup",
                str(cgroup),
                "--json",
            ],
            cwd=ROOT,
            env={**os.environ, "DESKSIDE_HOME": str(session_home)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        started.append(guard)
        assert guard.stdout is not None
        first = json.loads(guard.stdout.readline())
        assert first["floor_bytes"] == FLOOR and first["cgroup"] == str(cgroup)

        hog = subprocess.Popen(
            [sys.executable, "-c", HOG, str(HOLD)],
            stdout=subprocess.PIPE,
            preexec_fn=lambda: _into(cgroup),
        )
        started.append(hog)
        assert hog.stdout is not None
        held = float(hog.stdout.readline())
        usage = int((cgroup / "memory.usage_in_bytes").read_text())
        assert LIMIT - usage < FLOOR, f"usage {usage} leaves more than the floor"

        # still running just before the window can have passed
        time.sleep(max(held + WINDOW - 0.6 - time.time(), 0))
        assert engine.poll() is None, "the guard stopped the engine before the window"

        assert engine.wait(timeout=15) == 0  # a graceful stop: SIGTERM, handled
        stopped_at = float(marker.read_text())
        assert stopped_at - held >= WINDOW - 0.6  # the hog crossed the floor before `held`

        guard.terminate()
        out, errors = guard.communicate(timeout=10)
        stop = json.loads(out.decode().splitlines()[0])
        assert stop["stopped"] == f"process {engine.pid}", errors
        assert stop["ok"] is True and stop["low_seconds"] >= WINDOW
        assert stop["available_bytes"] < FLOOR
        assert stop["source"].startswith(f"memory cgroup {cgroup}")
        saved = json.loads((Path(layout.recipe_dir) / "guard.json").read_text())
        assert saved == stop

        st = deskside("status", NAME, "--json", home=session_home, timeout=60)
        assert st.returncode in (0, 1, 3), st.stderr
        node = json.loads(st.stdout)["nodes"][0]
        assert node["state"] == "exited"
        assert "stopped by guard: memory cgroup" in node["reason"]
        assert f"below the floor {FLOOR / MIB:.2f} MiB" in node["reason"]
    finally:
        for p in reversed(started):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
        run_file(NAME).unlink(missing_ok=True)

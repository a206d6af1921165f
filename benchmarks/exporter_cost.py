"""The cost of one scrape of `deskside exporter` (target: p50 <= 20 ms).

A real exporter (its own process) serves the GB10 head's fixture trees (sysfs, proc) for
the flagship recipe, with a stub engine (http.server in a thread of this process) serving
the recorded vLLM /metrics as --engine-url, so every scrape does the whole work: meminfo,
the plan's floor (computed once at start), sysfs GID resolution, the engine-process
lookup, NVML (none here: gpu_present 0) and one HTTP GET of the engine's /metrics. Each
scrape is timed from the client (one keep-alive connection, GET to the last byte).

Also measured: the wall time of `deskside exporter --once` (a fresh process: imports,
recipe, plan, one collection) and of `deskside --help` in the same environment (the
CLI's start-up alone) for comparison.

Run: python benchmarks/exporter_cost.py [--scrapes 50]
The last line is `scrape_ms_p50: <float>`."""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "unit" / "fixtures"
RECIPE = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"
RECORDED = (FIXTURES / "engine" / "vllm-metrics.txt").read_bytes()


class Engine(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as vLLM's server (uvicorn) answers
    disable_nagle_algorithm = True  # TCP_NODELAY like uvicorn: no 40 ms delayed-ACK stall

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(RECORDED)))
        self.end_headers()
        self.wfile.write(RECORDED)

    def log_message(self, format: str, *args: object) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def wall(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(args, env=env, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=50)
    opts = parser.parse_args()

    engine = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    engine_url = f"http://127.0.0.1:{engine.server_address[1]}/metrics"
    home = tempfile.mkdtemp(prefix="deskside-exporter-bench-")
    env = dict(os.environ, DESKSIDE_HOME=home, PYTHONPATH=str(ROOT / "src"))
    common = [
        "--recipe", str(RECIPE), "--node", "ai1",
        "--sysfs-root", str(FIXTURES / "sysfs" / "gb10-head" / "sys"),
        "--proc-root", str(FIXTURES / "proc" / "gb10-head"),
        "--engine-url", engine_url,
    ]  # fmt: skip
    cli = [sys.executable, "-m", "deskside.cli"]

    port = free_port()
    proc = subprocess.Popen(
        [*cli, "exporter", *common, "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 60
        with httpx.Client(timeout=10) as client:
            while True:
                if proc.poll() is not None:
                    raise SystemExit(
                        f"exporter exited: {proc.stderr.read() if proc.stderr else ''}"
                    )
                try:
                    client.get(url)  # warm-up scrape (connections, first collection)
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise SystemExit("the exporter did not start") from None
                    time.sleep(0.05)
            times = []
            size = 0
            for _ in range(opts.scrapes):
                t0 = time.perf_counter()
                response = client.get(url)
                times.append((time.perf_counter() - t0) * 1000)
                assert response.status_code == 200 and b"deskside_engine_up" in response.content
                size = len(response.content)
        proc.terminate()
        proc.wait(timeout=15)
        once = [wall([*cli, "exporter", "--once", *common], env) for _ in range(3)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=15)
        engine.shutdown()
        engine.server_close()
    help_ = [wall([*cli, "--help"], env) for _ in range(3)]
    print(f"scrapes: {opts.scrapes}, exposition {size} bytes")
    print(f"once_seconds_median: {statistics.median(once):.3f}")
    print(f"cli_help_seconds_median: {statistics.median(help_):.3f}  (start-up alone)")
    print(f"scrape_ms_p95: {percentile(times, 0.95):.2f}")
    print(f"scrape_ms_p50: {statistics.median(times):.2f}")


if __name__ == "__main__":
    main()

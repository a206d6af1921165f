"""`deskside exporter` for real: a subprocess serving /metrics on 127.0.0.1 (a free port)
from the GB10 fixture trees, with a stub engine serving the recorded vLLM /metrics. Two
scrapes parse, the second one knows how long the token counter has stood still, and
SIGTERM stops the exporter with exit 0."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from deskside.exporter import series

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
FIXTURES = ROOT / "tests" / "unit" / "fixtures"
FLAGSHIP = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"
RECORDED = (FIXTURES / "engine" / "vllm-metrics.txt").read_bytes()


class _Engine(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code, body = (200, RECORDED) if self.path == "/metrics" else (404, b"")
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def engine_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    response = httpx.get(url, timeout=5)
    assert response.status_code == 200
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def wait_listening(proc: subprocess.Popen[str], port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            stderr = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"exporter exited {proc.returncode}: {stderr}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("the exporter did not listen in time")


def test_serve_scrape_twice_and_stop(tmp_path: Path, engine_url: str) -> None:
    port = free_port()
    env = dict(os.environ, DESKSIDE_HOME=str(tmp_path), PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deskside.cli",
            "exporter",
            "--recipe",
            str(FLAGSHIP),
            "--node",
            "ai1",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--sysfs-root",
            str(FIXTURES / "sysfs" / "gb10-head" / "sys"),
            "--proc-root",
            str(FIXTURES / "proc" / "gb10-head"),
            "--engine-url",
            engine_url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        wait_listening(proc, port)
        url = f"http://127.0.0.1:{port}/metrics"
        first = scrape(url)
        time.sleep(0.3)
        second = scrape(url)
        for samples in (first, second):
            assert samples[series.ENGINE_UP] == [({"node": "ai1"}, 1.0)]
            assert samples[series.GID_DRIFT] == [({"node": "ai1", "device": "rocep1s0f0"}, 0.0)]
            assert samples[series.GPU_PRESENT] == [({"node": "ai1"}, 0.0)]
            assert series.VERSIONS in samples
            assert not [n for n in samples if n.startswith(("python_", "process_"))]
        # the recorded engine runs requests and its counter stands still between scrapes
        ((_, since_first),) = first[series.ENGINE_SINCE_TOKEN]
        ((_, since_second),) = second[series.ENGINE_SINCE_TOKEN]
        assert since_second >= since_first + 0.25
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert f"127.0.0.1:{port}/metrics" in (proc.stdout.read() if proc.stdout else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=15)


def _exporter(tmp_path: Path, engine: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "deskside.cli",
        "node",
        "exporter",
        "--recipe",
        str(FLAGSHIP),
        "--node",
        "ai1",
        "--sysfs-root",
        str(FIXTURES / "sysfs" / "gb10-head" / "sys"),
        "--proc-root",
        str(FIXTURES / "proc" / "gb10-head"),
        "--engine-url",
        engine,
        *extra,
    ]


@pytest.mark.parametrize("mode", ["drip-body", "drip-headers", "silent", "huge", "garbage"])
def test_a_hostile_engine_leaves_the_nodes_own_series_served(tmp_path: Path, mode: str) -> None:
    """--once against an engine /metrics that drips, stays silent, sends gigabytes or
    garbage: done within the engine scrape's deadline, the engine down, the rest served."""
    from tests.hostile_http import hostile_server

    env = dict(os.environ, DESKSIDE_HOME=str(tmp_path), PYTHONPATH=str(ROOT / "src"))
    with hostile_server(mode) as url:
        t0 = time.monotonic()
        done = subprocess.run(
            _exporter(tmp_path, f"{url}/metrics", "--once"),
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )
        seconds = time.monotonic() - t0
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    found = {
        s.name: s.value for f in text_string_to_metric_families(done.stdout) for s in f.samples
    }
    assert found[series.ENGINE_UP] == 0.0
    assert series.GPU_PRESENT in found and series.VERSIONS in found
    assert seconds < 20, seconds  # interpreter start + a 2 s engine deadline


def test_idle_connections_do_not_starve_a_scrape(tmp_path: Path, engine_url: str) -> None:
    """Three hundred connections that never send a request: a scrape still answers, at
    once, and the exporter holds no thread per connection."""
    port = free_port()
    env = dict(os.environ, DESKSIDE_HOME=str(tmp_path), PYTHONPATH=str(ROOT / "src"))
    extra = ("--host", "127.0.0.1", "--port", str(port))
    proc = subprocess.Popen(
        _exporter(tmp_path, engine_url, *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    idle: list[socket.socket] = []
    try:
        wait_listening(proc, port)
        for _ in range(300):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            idle[-1].sendall(b"GET /met")  # a head that never ends
        t0 = time.monotonic()
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
        assert samples[series.ENGINE_UP] == [({"node": "ai1"}, 1.0)]
        assert time.monotonic() - t0 < 5
        threads = len(os.listdir(f"/proc/{proc.pid}/task"))
        assert threads < 20, threads
        # a head that trickles in is dropped at its deadline, however steadily it comes
        slow = socket.create_connection(("127.0.0.1", port), timeout=10)
        t0 = time.monotonic()
        try:
            for byte in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 100:
                slow.sendall(bytes([byte]))
                time.sleep(0.1)
        except OSError:
            pass  # closed under our feet: what is claimed
        slow.settimeout(3)
        with contextlib.suppress(ConnectionResetError):
            assert slow.recv(1024) == b""  # closed, nothing served
        assert time.monotonic() - t0 < 15
        slow.close()
    finally:
        for s in idle:
            s.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=15)

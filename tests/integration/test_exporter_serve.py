"""`deskside exporter` for real: a subprocess serving /metrics on 127.0.0.1 (a free port)
from the GB10 fixture trees, with a stub engine serving the recorded vLLM /metrics. Two
scrapes parse, the second one knows how long the token counter has stood still, and
SIGTERM stops the exporter with exit 0."""

from __future__ import annotations

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

"""`deskside monitor check` and `deskside top` against a real Prometheus (the Debian
binary) scraping a stub /metrics server every second: the jobs vllm, node and deskside of
the rendered configuration, node0's series (no GPU, no RDMA device), and a job `ghost`
whose target never answers.

A missing `prometheus` fails these tests: `scripts/system-deps` installs it."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from deskside.cli.app import app
from deskside.monitor.check import check
from deskside.monitor.prom_api import Prometheus
from deskside.monitor.sources import Expression, rendered

from ..monitor_stub import run_record, saved_run, stub_server
from ..unit.render_cases import LOCAL_TINY, load_and_plan

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(stub: int, ghost: int) -> str:
    def job(name: str, path: str, port: int) -> str:
        return (
            f"  - job_name: {name}\n    metrics_path: {path}\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{port}']\n        labels: {{node: node0}}\n"
        )

    return (
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [rules.yml]\n"
        "scrape_configs:\n"
        + job("vllm", "/metrics", stub)
        + job("node", "/node", stub)
        + job("deskside", "/deskside", stub)
        + job("ghost", "/metrics", ghost)
    )


RULES = """groups:
  - name: stub
    rules:
      - alert: StubAlwaysFiring
        expr: vector(1)
        labels: {node: node0}
        annotations: {summary: always}
"""


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: run scripts/system-deps (as root)")
    folder = tmp_path_factory.mktemp("prometheus")
    port = free_port()
    with stub_server() as stub:
        (folder / "prometheus.yml").write_text(config(stub, free_port()))
        (folder / "rules.yml").write_text(RULES)
        log = (folder / "log").open("wb")
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, proc, folder / "log")
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            log.close()


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the stub's targets are up, have three samples each, and the rule fired."""
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited: {log.read_text()[-2000:]}")
            try:
                r = client.get(
                    f"{url}/api/v1/query",
                    params={"query": 'min(count_over_time(up{job!="ghost"}[1m])) >= 3'},
                )
                alerts = client.get(f"{url}/api/v1/alerts").json()["data"]["alerts"]
                if r.json()["data"]["result"] and alerts:
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.5)
    pytest.fail(f"prometheus did not scrape the stub in 60s: {log.read_text()[-2000:]}")


def test_check_against_live_prometheus(prometheus: str) -> None:
    recipe, plan = load_and_plan(LOCAL_TINY)
    mon = rendered(recipe, LOCAL_TINY, plan)
    extra = [
        Expression('ghost_series{job="ghost"}', "test:ghost", "dashboard"),
        Expression("sum(nobody_exports_this_total)", "test:unexported", "dashboard"),
    ]
    with Prometheus(prometheus) as prom:
        report = check(
            prom, mon.expressions + extra, scrape_interval="1s", jobs=mon.jobs, recipe="stub"
        )
    by = {f.source: f for f in report.findings}
    present = by["dashboard:KV cache usage/A"]
    assert present.has_data and present.reason is None
    assert by["dashboard:Requests/B"].has_data
    assert by["dashboard:Tokens per second/B"].has_data  # the generated tokens grow
    assert by["dashboard:Memory available/A"].has_data
    gpu = by["dashboard:GPU power/A"]
    assert (gpu.has_data, gpu.reason_code, gpu.reason) == (
        False,
        "no_gpu",
        "no GPU on this machine",
    )
    rdma = by["dashboard:RoCE receive/A"]
    assert (rdma.reason_code, rdma.reason) == ("no_rdma", "no RDMA device on this machine")
    # counters that exist but never moved: 0/0 and quantiles of empty histograms are NaN
    assert by["dashboard:Prefix cache hit rate/A"].reason_code == "no_traffic"
    assert by["dashboard:Time to first token/A"].reason_code == "no_traffic"
    assert "did not increase" in str(by["dashboard:Time to first token/A"].reason)
    assert by["test:unexported"].reason == "nobody exports nobody_exports_this_total"
    ghost = by["test:ghost"]
    assert ghost.reason_code == "target_down" and ghost.reason is not None
    assert ghost.reason.startswith("target ghost on 127.0.0.1:") and ghost.reason.endswith("down")
    # rules: healthy while not firing, when every series they read has data
    engine_down = by["rule:EngineDown"]
    assert engine_down.has_data and engine_down.firing is False
    assert by["rule:KVCacheUsageHigh"].has_data and by["rule:MemoryHeadroomLow"].has_data
    # the stub serves no inter-token histogram: a vLLM series nobody exports here
    assert by["dashboard:Inter-token latency/A"].reason_code == "not_exported"
    assert not report.ok


def test_top_once_json_reads_prometheus(prometheus: str) -> None:
    """The run's node0 is the stub's node0 (Prometheus labels its series so); the engine's
    API is not needed when Prometheus answers. The recipe's fabric interface is unknown
    (no recipe file), so no fabric figures."""
    with saved_run(run_record("moncheck-live", "http://127.0.0.1:9")):
        result = CliRunner().invoke(
            app, ["top", "--once", "--json", "--prometheus", prometheus], catch_exceptions=False
        )
    assert result.exit_code == 0, result.output
    snap = json.loads(result.output)
    assert snap["source"] == "prometheus"
    node = snap["nodes"][0]
    assert node["name"] == "node0" and node["gpu_present"] is False
    assert node["headroom_bytes"] == 32 * 2**30 and node["below_floor"] is False
    assert node["fabric"] is None and node["memory_total_bytes"] == 64 * 2**30
    engine = snap["engine"]
    assert engine["kv_cache_usage"] == 0.25 and engine["requests_waiting"] == 2
    assert engine["generation_tokens_per_s"] > 0
    assert [p["acceptance"] for p in engine["spec_acceptance_per_position"]] == [0.5, 0.2, 0.05]
    assert [a["name"] for a in snap["alerts"]] == ["StubAlwaysFiring"]

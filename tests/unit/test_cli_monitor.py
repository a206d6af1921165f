"""`deskside monitor check` and `deskside top` through the CLI (typer's CliRunner), with
Prometheus replaced by recorded answers: the --json shapes, the exit codes, and the error
when Prometheus does not answer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from deskside.cli.app import app
from deskside.exporter import series

from ..monitor_stub import GIB, run_record, saved_run
from .prom_fake import FakeProm
from .render_cases import LOCAL_TINY, ensure_tiny_model

PROM = "http://prom.test:9090"


@pytest.fixture
def tiny_recipe() -> str:
    ensure_tiny_model(LOCAL_TINY.parent / "models" / "tiny-deepseek-v3")
    return str(LOCAL_TINY)


def use(monkeypatch: pytest.MonkeyPatch, client: Callable[[], httpx.Client]) -> None:
    """Every HTTP client the commands make comes from `client` (a fresh one each time)."""
    monkeypatch.setattr("deskside.monitor.prom_api.make_client", client)


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_check_json_shape_and_exit_1_on_problems(
    monkeypatch: pytest.MonkeyPatch, tiny_recipe: str
) -> None:
    up = [({"job": "vllm", "instance": "10.77.0.1:8888"}, 0)]
    use(monkeypatch, FakeProm(names=["up"], vectors={'up{job="vllm"}': up}).client)
    code, stdout, _ = invoke("monitor", "check", tiny_recipe, "--prometheus", PROM, "--json")
    assert code == 1
    data = json.loads(stdout)
    assert data["recipe"] == "local-tiny" and data["prometheus"] == PROM and data["ok"] is False
    assert set(data["summary"]) == {"expressions", "with_data", "declared", "problems", "firing"}
    rows = {r["source"]: r for r in data["expressions"]}
    kv = rows["dashboard:KV cache usage/A"]
    assert {"expr", "source", "has_data", "reason"} <= set(kv)
    assert kv["has_data"] is False
    assert kv["reason"] == "target vllm on 10.77.0.1:8888 is down"
    assert rows["rule:EngineDown"]["has_data"] is True and "firing" in rows["rule:EngineDown"]


def test_check_exit_0_when_only_declared_reasons(
    monkeypatch: pytest.MonkeyPatch, tiny_recipe: str
) -> None:
    """Every query answers with one number, but the GPU and RDMA series nobody exports."""

    class AllData(FakeProm):
        def handler(self, request: httpx.Request) -> httpx.Response:
            query = request.url.params.get("query", "")
            if request.url.path == "/api/v1/query" and not (
                "deskside_gpu_" in query or "node_infiniband_" in query
            ):
                value = 1.0 if query.startswith("up") else 0.0  # every target up
                self.vectors.setdefault(query, [({"node": "node0"}, value)])
            return super().handler(request)

    fake = AllData(
        names=["up", series.GPU_PRESENT],
        vectors={series.GPU_PRESENT: [({"node": "node0"}, 0)]},
        jobs={'{__name__=~"deskside_.+"}': ["deskside"], '{__name__=~"node_.+"}': ["node"]},
    )
    use(monkeypatch, fake.client)
    code, stdout, _ = invoke("monitor", "check", tiny_recipe, "--prometheus", PROM, "--json")
    data = json.loads(stdout)
    reasons = {r["reason"] for r in data["expressions"]}
    assert reasons == {None, "no GPU on this machine", "no RDMA device on this machine"}
    assert code == 0 and data["ok"] is True
    code, stdout, _ = invoke("monitor", "check", tiny_recipe, "--prometheus", PROM)
    assert code == 0 and "without data for a declared reason, 0 problem(s)" in stdout


def test_check_prometheus_not_answering(monkeypatch: pytest.MonkeyPatch, tiny_recipe: str) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    use(monkeypatch, lambda: httpx.Client(transport=httpx.MockTransport(refuse)))
    code, stdout, stderr = invoke("monitor", "check", tiny_recipe, "--prometheus", PROM)
    assert code == 1 and stdout == ""
    assert f"error: Prometheus at {PROM} does not answer" in stderr
    assert "deskside up" in stderr and "monitoring" in stderr
    assert "Traceback" not in stderr
    code, stdout, _ = invoke("monitor", "check", tiny_recipe, "--prometheus", PROM, "--json")
    assert code == 1 and json.loads(stdout)["error"] == "PrometheusUnreachable"


def test_check_help_names_the_exit_codes() -> None:
    code, stdout, _ = invoke("monitor", "check", "--help")
    assert code == 0 and "Exits 0" in stdout and "1 otherwise" in stdout


def test_top_once_json(monkeypatch: pytest.MonkeyPatch) -> None:
    node = {"node": "node0"}
    fake = FakeProm(
        vectors={
            series.MEMORY_AVAILABLE: [(node, 9 * GIB)],
            series.MEMORY_FLOOR: [(node, 8 * GIB)],
            series.GPU_PRESENT: [(node, 0)],
            "vllm:num_requests_waiting": [(node, 3)],
        },
        alerts=[{"labels": {"alertname": "KVCacheUsageHigh", "node": "node0"}, "state": "firing"}],
    )
    use(monkeypatch, fake.client)
    with saved_run(run_record("moncheck-unit", "http://10.0.0.1:8888")):
        code, stdout, stderr = invoke("top", "--once", "--json", "--prometheus", PROM)
    assert code == 0, stderr
    data = json.loads(stdout)
    assert set(data) == {"recipe", "source", "taken_at", "nodes", "engine", "alerts", "notes"}
    assert data["source"] == "prometheus" and data["recipe"] == "moncheck-unit"
    [n] = data["nodes"]
    assert n["name"] == "node0" and n["headroom_bytes"] == GIB and n["gpu_present"] is False
    assert data["engine"]["requests_waiting"] == 3
    assert data["alerts"] == [
        {"name": "KVCacheUsageHigh", "state": "firing", "node": "node0", "summary": None}
    ]


def test_top_once_table(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, FakeProm().client)
    with saved_run(run_record("moncheck-unit", "http://10.0.0.1:8888")):
        code, stdout, _ = invoke("top", "moncheck-unit", "--once", "--prometheus", PROM)
    assert code == 0 and "node0" in stdout and "KV cache usage" in stdout


def test_top_without_a_run() -> None:
    code, stdout, _ = invoke("top", "--once", "--json")
    assert code == 1 and json.loads(stdout)["message"] == "nothing is running"


def test_top_rejects_a_bad_interval() -> None:
    code, _, stderr = invoke("top", "--interval", "0", "--once")
    assert code == 2 and "--interval" in stderr


def test_check_without_monitoring_says_so(
    monkeypatch: pytest.MonkeyPatch, tiny_recipe: str, tmp_path: Path
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    text = Path(tiny_recipe).read_text()
    assert "monitoring:\n" in text and "  enabled: true\n  scrape_interval" in text
    off = tmp_path / "local-tiny.yaml"
    off.write_text(
        text.replace("  enabled: true\n  scrape_interval", "  enabled: false\n  scrape_interval")
    )
    (tmp_path / "models").symlink_to(Path(tiny_recipe).parent / "models")
    use(monkeypatch, lambda: httpx.Client(transport=httpx.MockTransport(refuse)))
    code, _, stderr = invoke("monitor", "check", str(off))
    assert code == 1 and "http://10.77.0.1:9090" in stderr
    assert "monitoring switched off" in stderr and "monitoring.enabled: true" in stderr


class Stop(Exception):
    pass


def test_top_live_view_refreshes(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeProm(vectors={"vllm:num_requests_waiting": [({"node": "node0"}, 3)]})
    use(monkeypatch, fake.client)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise Stop

    monkeypatch.setattr("deskside.cli.monitor.time.sleep", sleep)
    with saved_run(run_record("moncheck-unit", "http://10.0.0.1:8888")):
        result = CliRunner().invoke(app, ["top", "--interval", "0.5", "--prometheus", PROM])
    assert isinstance(result.exception, Stop) and sleeps == [0.5, 0.5]
    assert "node0" in result.stdout
    assert fake.asked.count("vllm:num_requests_waiting") == 2  # two snapshots

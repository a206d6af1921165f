"""Monitoring against a Prometheus or a /metrics endpoint that misbehaves: dripping,
silent, huge, garbage, or JSON in shapes the API never has — a clear error or a note,
within the deadline, never a hang or a traceback."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from deskside.httpclient import Limits, client
from deskside.monitor.prom_api import Prometheus, PrometheusUnreachable, make_client
from deskside.monitor.readings import Endpoint, scrape
from tests.hostile_http import hostile_server


@pytest.mark.parametrize("mode", ["drip-body", "drip-headers", "silent", "huge", "garbage"])
def test_a_hostile_prometheus_is_unreachable_within_the_deadline(mode: str) -> None:
    with hostile_server(mode) as url:
        with Prometheus(url) as prom:  # the client monitor commands use
            t0 = time.monotonic()
            assert prom.ready(timeout=1.0) is False
            assert time.monotonic() - t0 < 2.5
        with Prometheus(url, client(Limits(total=1.0, max_bytes=1 << 20))) as prom:
            t0 = time.monotonic()
            with pytest.raises(PrometheusUnreachable):
                prom.query("up")
            assert time.monotonic() - t0 < 2.5


@pytest.mark.parametrize(
    "data",
    [
        {"resultType": "vector", "result": [1, 2]},
        {"resultType": "vector", "result": [{"metric": "x", "value": []}]},
        {"resultType": "matrix", "result": [{"values": "abc"}]},
        {"resultType": "scalar", "result": []},
    ],
)
def test_answers_in_impossible_shapes_are_refused(data: object) -> None:
    body = json.dumps({"status": "success", "data": data}).encode()
    mock = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    with (
        Prometheus("http://prom:9090", httpx.Client(transport=mock)) as prom,
        pytest.raises(PrometheusUnreachable, match="shape"),
    ):
        prom.query("up")


@pytest.mark.parametrize("data", [{"alerts": [1]}, {"alerts": [{"labels": [1, 2]}]}, {"alerts": 5}])
def test_alerts_in_impossible_shapes_are_refused(data: object) -> None:
    body = json.dumps({"status": "success", "data": data}).encode()
    mock = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    with (
        Prometheus("http://prom:9090", httpx.Client(transport=mock)) as prom,
        pytest.raises(PrometheusUnreachable, match="shape"),
    ):
        prom.alerts()


def test_deep_json_is_refused_not_a_recursion_error() -> None:
    body = b'{"status": "success", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    mock = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    with (
        Prometheus("http://prom:9090", httpx.Client(transport=mock)) as prom,
        pytest.raises(PrometheusUnreachable),
    ):
        prom.query("up")


def test_scraping_hostile_endpoints_leaves_notes_within_the_deadline() -> None:
    with (
        hostile_server("drip-body") as drip,
        hostile_server("garbage") as garbage,
        hostile_server("huge") as huge,
        make_client() as client,
    ):
        endpoints = [
            Endpoint("engine", "ai1", f"{drip}/metrics"),
            Endpoint("exporter", "ai1", f"{garbage}/metrics"),
            Endpoint("node_exporter", "ai2", f"{huge}/metrics"),
        ]
        t0 = time.monotonic()
        result, notes = scrape(client, endpoints)
        assert time.monotonic() - t0 < 3 * 3.0 + 3
    assert len(notes) == 3, notes
    assert result.samples == {}

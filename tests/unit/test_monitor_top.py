"""`deskside top`: snapshots built from recorded expositions (the endpoints, rates from two
scrapes) and from recorded Prometheus answers; headroom, tokens per second, speculative
acceptance per position, the fabric, the GID; the watcher's fallback; the rendering."""

from __future__ import annotations

import httpx
from rich.console import Console

from deskside.exporter import series
from deskside.monitor.prom_api import Prometheus
from deskside.monitor.readings import EndpointReadings, PromReadings, Scrape, parse_exposition
from deskside.monitor.snapshot import NodeSpec, Snapshot, build_snapshot
from deskside.monitor.top import Target, Watcher
from deskside.monitor.view import top_view

from ..monitor_stub import GIB, engine_text, exporter_text, node_exporter_text
from .prom_fake import FakeProm
from .test_bench_server_metrics import AFTER, BEFORE

NODE0 = NodeSpec(name="node0", role="head", address="10.77.0.1", fabric_interface="ds-veth0")


def scrape_of(at: float, *texts: str, node: str = "node0") -> Scrape:
    s = Scrape(at)
    for text in texts:
        s.add(parse_exposition(text, node))
    return s


def snap(
    latest: Scrape, previous: Scrape | None = None, nodes: list[NodeSpec] | None = None
) -> Snapshot:
    return build_snapshot(
        EndpointReadings(latest, previous), nodes or [NODE0], recipe="r", taken_at="t"
    )


def test_headroom_is_available_minus_floor_in_bytes() -> None:
    s = snap(scrape_of(0, exporter_text(available=40 * GIB, floor=8 * GIB)))
    [n] = s.nodes
    assert n.memory_available_bytes == 40 * GIB and n.memory_floor_bytes == 8 * GIB
    assert n.headroom_bytes == 32 * GIB and n.below_floor is False
    assert n.memory_total_bytes == 64 * GIB
    assert n.gpu_present is False and n.gpus == []


def test_below_floor_is_negative_headroom_and_shows_red() -> None:
    s = snap(scrape_of(0, exporter_text(available=6 * GIB, floor=8 * GIB)))
    [n] = s.nodes
    assert n.headroom_bytes == -2 * GIB and n.below_floor is True
    console = Console(record=True, width=200, color_system="truecolor")
    console.print(top_view(s))
    assert "-2.00 GiB" in console.export_text(clear=False)
    assert "\x1b[1;31m-2.00 GiB" in console.export_text(styles=True)


def test_memory_from_node_exporter_without_deskside_exporter() -> None:
    [n] = snap(scrape_of(0, node_exporter_text())).nodes
    assert n.memory_available_bytes == 40 * GIB and n.headroom_bytes is None
    assert n.gpu_present is None


def test_tokens_per_second_from_two_samples() -> None:
    before = scrape_of(100.0, engine_text(generated=1000))
    after = scrape_of(102.0, engine_text(generated=1200))
    assert snap(after, before).engine.generation_tokens_per_s == 100.0
    assert snap(after).engine.generation_tokens_per_s is None  # one scrape: no rate yet


def test_counter_reset_counts_from_zero() -> None:
    before = scrape_of(0.0, engine_text(generated=5000))
    after = scrape_of(4.0, engine_text(generated=40))
    assert snap(after, before).engine.generation_tokens_per_s == 10.0


def test_engine_figures_from_a_real_vllm_exposition() -> None:
    e = snap(scrape_of(12.0, AFTER), scrape_of(10.0, BEFORE)).engine
    assert e.up is True  # vLLM's own series answer
    # engines 0 and 1 and another model: (2000 + 20 + 99999) - (1000 + 10 + 99999) over 2 s
    assert e.generation_tokens_per_s == 505.0
    # totals since the start: 380/240/130/39/11 accepted per position over 500 drafts
    assert [(p.position, p.acceptance) for p in e.spec_acceptance_per_position] == [
        (0, 0.76),
        (1, 0.48),
        (2, 0.26),
        (3, 0.078),
        (4, 0.022),
    ]
    assert e.spec_acceptance == 800 / 2500
    assert e.requests_running == 0


def test_engine_figures_of_the_stub() -> None:
    e = snap(scrape_of(0, engine_text(), exporter_text())).engine
    assert (e.kv_cache_usage, e.requests_running, e.requests_waiting) == (0.25, 1, 2)
    assert [p.acceptance for p in e.spec_acceptance_per_position] == [0.5, 0.2, 0.05]
    assert e.seconds_since_last_token == 0.5 and e.up is True


def test_fabric_interface_without_rdma() -> None:
    before = scrape_of(0.0, node_exporter_text(rx=1_000_000))
    after = scrape_of(2.0, node_exporter_text(rx=3_000_000))
    [n] = snap(after, before).nodes
    assert n.fabric is not None
    assert (n.fabric.kind, n.fabric.devices) == ("interface", ["ds-veth0"])
    assert (n.fabric.rx_bytes_per_s, n.fabric.tx_bytes_per_s) == (1_000_000, 500_000)
    assert n.fabric.counters == {"receive_errs_total": 3}
    unknown = NodeSpec(name="node0", role="head", address="a", fabric_interface=None)
    assert snap(after, before, [unknown]).nodes[0].fabric is None


def rdma_text(rx: float, errors: float = 0, drift: int = 0) -> str:
    return (
        "# TYPE node_infiniband_port_data_received_bytes_total counter\n"
        f'node_infiniband_port_data_received_bytes_total{{device="rocep1s0f1",port="1"}} {rx}\n'
        "# TYPE node_infiniband_port_data_transmitted_bytes_total counter\n"
        f'node_infiniband_port_data_transmitted_bytes_total{{device="rocep1s0f1",port="1"}} {rx}\n'
        "# TYPE node_infiniband_port_errors_received_total counter\n"
        f'node_infiniband_port_errors_received_total{{device="rocep1s0f1",port="1"}} {errors}\n'
        "# TYPE node_infiniband_port_packets_received_total counter\n"
        f'node_infiniband_port_packets_received_total{{device="rocep1s0f1",port="1"}} 7\n'
        f"# TYPE {series.GID_INDEX} gauge\n"
        f'{series.GID_INDEX}{{node="node0",device="rocep1s0f1",port="1"}} 3\n'
        f"# TYPE {series.GID_LAUNCHED} gauge\n"
        f'{series.GID_LAUNCHED}{{node="node0",device="rocep1s0f1"}} 1\n'
        f"# TYPE {series.GID_DRIFT} gauge\n"
        f'{series.GID_DRIFT}{{node="node0",device="rocep1s0f1"}} {drift}\n'
    )


def test_rdma_fabric_counters_and_gid_drift() -> None:
    before = scrape_of(0.0, rdma_text(1e9), node_exporter_text())
    after = scrape_of(1.0, rdma_text(3e9, errors=2, drift=1), node_exporter_text())
    [n] = snap(after, before).nodes
    assert n.fabric is not None and n.fabric.kind == "rdma"
    assert n.fabric.devices == ["rocep1s0f1:1"]
    assert n.fabric.rx_bytes_per_s == 2e9
    assert n.fabric.counters == {"port_errors_received_total": 2}  # packets are not trouble
    assert (n.gid_index, n.gid_launched_index, n.gid_drift) == (3, 1, True)
    console = Console(record=True, width=200)
    console.print(top_view(snap(after, before)))
    assert "DRIFT (engine uses 1)" in console.export_text()


def test_snapshot_from_prometheus() -> None:
    node = {"node": "node0", "job": "deskside"}
    fake = FakeProm(
        vectors={
            series.MEMORY_AVAILABLE: [(node, 10 * GIB)],
            series.MEMORY_FLOOR: [(node, 12 * GIB)],
            series.GPU_PRESENT: [(node, 1)],
            series.GPU_UTILIZATION: [({**node, "gpu": "0"}, 0.5)],
            series.GPU_POWER: [({**node, "gpu": "0"}, 40)],
            "vllm:kv_cache_usage_perc": [({"node": "node0"}, 0.5)],
            "rate(vllm:generation_tokens_total[1m])": [({"node": "node0"}, 12.5)],
        },
        alerts=[
            {"labels": {"alertname": "B", "node": "node0"}, "state": "pending"},
            {
                "labels": {"alertname": "A", "node": "node0"},
                "annotations": {"summary": "s"},
                "state": "firing",
            },
        ],
    )
    prom = Prometheus("http://p", fake.client())
    s = build_snapshot(PromReadings(prom), [NODE0], recipe="r", taken_at="t", alerts=prom.alerts())
    [n] = s.nodes
    assert s.source == "prometheus"
    assert n.headroom_bytes == -2 * GIB and n.below_floor is True
    assert n.gpu_present is True and n.gpus[0].utilization == 0.5 and n.gpus[0].power_watts == 40
    assert s.engine.generation_tokens_per_s == 12.5 and s.engine.kv_cache_usage == 0.5
    assert s.alerts is not None
    assert [(a.name, a.state, a.summary) for a in s.alerts] == [
        ("A", "firing", "s"),
        ("B", "pending", None),
    ]


def endpoints_handler(generated: list[float]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        if url == "http://10.77.0.1:8888/metrics":
            return httpx.Response(200, text=engine_text(generated=generated.pop(0)))
        if url == f"http://10.77.0.1:{series.EXPORTER_PORT}/metrics":
            return httpx.Response(200, text=exporter_text())
        if url == "http://10.77.0.1:9100/metrics":
            return httpx.Response(200, text=node_exporter_text())
        raise httpx.ConnectError("refused", request=request)

    return httpx.MockTransport(handle)


def test_watcher_reads_the_endpoints_when_prometheus_does_not_answer() -> None:
    worker = NodeSpec(name="node1", role="worker", address="10.77.0.2")
    target = Target(
        recipe="r",
        nodes=[NODE0, worker],
        api_url="http://10.77.0.1:8888",
        prometheus_url="http://10.77.0.1:9090",
    )
    client = httpx.Client(transport=endpoints_handler([1000.0, 1100.0, 1300.0]))
    watcher = Watcher(target, interval=0.01, client=client)
    first = watcher.snapshot()
    assert first.source == "endpoints" and first.alerts is None
    assert first.engine.generation_tokens_per_s is not None
    assert first.engine.generation_tokens_per_s > 0
    assert first.nodes[0].headroom_bytes == 32 * GIB
    assert any("Prometheus at http://10.77.0.1:9090 does not answer" in n for n in first.notes)
    assert any(n.startswith("node1: exporter at http://10.77.0.2:9478") for n in first.notes)
    second = watcher.snapshot()  # one more scrape against the previous one
    assert second.engine.generation_tokens_per_s is not None


def test_watcher_prefers_prometheus() -> None:
    fake = FakeProm(vectors={"vllm:kv_cache_usage_perc": [({"node": "node0"}, 0.1)]})
    target = Target(recipe="r", nodes=[NODE0], api_url=None, prometheus_url="http://p:9090")
    s = Watcher(target, client=fake.client()).snapshot()
    assert s.source == "prometheus" and s.alerts == [] and s.engine.kv_cache_usage == 0.1

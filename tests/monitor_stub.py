"""Recorded-style /metrics texts for the monitor tests: the engine's (vLLM's names), deskside's
exporter's and node_exporter's, for a node `node0` with no GPU and no RDMA device, and a
tiny HTTP server that serves them (the engine's counter of generated tokens grows with
every scrape, the other counters stay put: no traffic)."""

from __future__ import annotations

import contextlib
import http.server
import itertools
import threading
from collections.abc import Iterator
from typing import Literal

from deskside.exporter import series
from deskside.records.node import NodeState
from deskside.records.run import RunNode, RunRecord, save_run
from deskside.records.where import run_file

GIB = 2**30


def engine_text(
    generated: float = 1000.0, accepted_per_pos: tuple[float, ...] = (30, 12, 3)
) -> str:
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="tiny"} 1.0',
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25',
        "# TYPE vllm:generation_tokens_total counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="tiny"}} {generated}',
        "# TYPE vllm:prompt_tokens_total counter",
        'vllm:prompt_tokens_total{engine="0",model_name="tiny"} 500.0',
        "# TYPE vllm:prefix_cache_queries_total counter",
        'vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 0.0',
        "# TYPE vllm:prefix_cache_hits_total counter",
        'vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 0.0',
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 60.0',
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 180.0',
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="tiny"}} '
        f"{sum(accepted_per_pos)}",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    for pos, value in enumerate(accepted_per_pos):
        lines.append(
            "vllm:spec_decode_num_accepted_tokens_per_pos_total"
            f'{{engine="0",model_name="tiny",position="{pos}"}} {value}'
        )
    lines += ["# TYPE vllm:time_to_first_token_seconds histogram"]
    for le in ("0.1", "1.0", "+Inf"):
        lines.append(
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}",model_name="tiny"}} 0.0'
        )
    lines += [
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 0.0',
        'vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 0.0',
    ]
    return "\n".join(lines) + "\n"


def exporter_text(node: str = "node0", available: float = 40 * GIB, floor: float = 8 * GIB) -> str:
    return (
        f"# TYPE {series.MEMORY_TOTAL} gauge\n"
        f'{series.MEMORY_TOTAL}{{node="{node}"}} {64 * GIB}\n'
        f"# TYPE {series.MEMORY_AVAILABLE} gauge\n"
        f'{series.MEMORY_AVAILABLE}{{node="{node}"}} {available}\n'
        f"# TYPE {series.MEMORY_FLOOR} gauge\n"
        f'{series.MEMORY_FLOOR}{{node="{node}"}} {floor}\n'
        f"# TYPE {series.GPU_PRESENT} gauge\n"
        f'{series.GPU_PRESENT}{{node="{node}"}} 0\n'
        f"# TYPE {series.ENGINE_UP} gauge\n"
        f'{series.ENGINE_UP}{{node="{node}"}} 1\n'
        f"# TYPE {series.ENGINE_SINCE_TOKEN} gauge\n"
        f'{series.ENGINE_SINCE_TOKEN}{{node="{node}"}} 0.5\n'
    )


def node_exporter_text(rx: float = 1_000_000.0, iface: str = "ds-veth0") -> str:
    return (
        "# TYPE node_memory_MemAvailable_bytes gauge\n"
        f"node_memory_MemAvailable_bytes {40 * GIB}\n"
        "# TYPE node_memory_MemTotal_bytes gauge\n"
        f"node_memory_MemTotal_bytes {64 * GIB}\n"
        "# TYPE node_network_receive_bytes_total counter\n"
        f'node_network_receive_bytes_total{{device="{iface}"}} {rx}\n'
        'node_network_receive_bytes_total{device="lo"} 5\n'
        "# TYPE node_network_transmit_bytes_total counter\n"
        f'node_network_transmit_bytes_total{{device="{iface}"}} {rx / 2}\n'
        "# TYPE node_network_receive_errs_total counter\n"
        f'node_network_receive_errs_total{{device="{iface}"}} 3\n'
    )


@contextlib.contextmanager
def stub_server() -> Iterator[int]:
    """Serves /metrics (the engine), /deskside and /node on 127.0.0.1; yields its port."""
    scrapes = itertools.count()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                body = engine_text(generated=1000.0 + 10 * next(scrapes))
            elif self.path == "/deskside":
                body = exporter_text()
            elif self.path == "/node":
                body = node_exporter_text()
            else:
                self.send_error(404)
                return
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def run_record(
    name: str,
    api_url: str,
    address: str = "127.0.0.1",
    *,
    runtime: Literal["local", "ssh"] = "local",
    recipe_dir: str | None = None,
    nodes: list[RunNode] | None = None,
) -> RunRecord:
    """A run record of one head node `node0` at `address` (as `deskside up` writes it on
    this machine, its folder under the run's unless `recipe_dir`), or of `nodes`, for
    commands that find the running run."""
    return RunRecord(
        recipe=f"/nonexistent/{name}.yaml",
        recipe_name=name,
        runtime=runtime,
        control="process",
        runtime_kind="native",
        unit=f"deskside-{name}",
        compose_project=f"deskside-{name}",
        api_url=api_url,
        proxy_url=None,
        served_names=["tiny"],
        started_at="2026-01-01T00:00:00Z",
        nodes=nodes
        or [
            RunNode(
                name="node0",
                role="head",
                node_rank=0,
                address=address,
                ssh=None,
                recipe_dir=recipe_dir or str(run_file(name).parent / "nodes" / "node0"),
            )
        ],
    )


def node_state(
    recipe: str,
    node: str = "node0",
    *,
    pid: int | None = None,
    pid_start: int | None = None,
    run_tag: str | None = None,
    log: str | None = None,
) -> NodeState:
    """The state `deskside up` keeps of a head engine run as a process on `node` of the run
    `recipe`: its session leader `pid` (started at `pid_start`), run tag and log."""
    return NodeState(
        recipe=recipe,
        node=node,
        role="head",
        node_rank=0,
        release=None,
        control="process",
        pid=pid,
        pid_start=pid_start,
        run_tag=run_tag,
        log=log,
        started_at="2026-01-01T00:00:00Z",
    )


@contextlib.contextmanager
def saved_run(record: RunRecord) -> Iterator[RunRecord]:
    save_run(record)
    try:
        yield record
    finally:
        run_file(record.recipe_name).unlink(missing_ok=True)

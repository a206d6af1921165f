"""Outputs (JSON round trip, CSV, PNG, HTML), compare's verdicts, and the CLI faces."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deskside.bench.compare import compare
from deskside.bench.models import SCHEMA_VERSION, BenchConfig, BenchResult
from deskside.bench.outputs.all import write_all
from deskside.bench.outputs.csv import CELL_COLUMNS, REQUEST_COLUMNS
from deskside.bench.outputs.json import read_json
from deskside.bench.runner import run_bench
from deskside.bench.synthetic import Behaviour, ThreadedServer, start_in_thread
from deskside.cli.app import app


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadedServer]:
    s = start_in_thread(
        Behaviour(
            ttft_s=0.01, chunk_interval_s=0.002, tokens_per_chunk=(2,), num_speculative_tokens=2
        )
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def result(server: ThreadedServer) -> BenchResult:
    config = BenchConfig(
        url=server.url, prompt_lens=[16, 64], concurrency=[1, 2], requests=4, max_tokens=13
    )
    return run_bench(config)


def test_write_all(result: BenchResult, tmp_path: Path) -> None:
    written = write_all(result, tmp_path)
    assert set(written) == {
        "json",
        "cells_csv",
        "requests_csv",
        "throughput_png",
        "ttft_png",
        "acceptance_png",
        "html",
    }
    again = read_json(tmp_path)
    assert again == result
    data = json.loads((tmp_path / "result.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert "api_key" not in data["config"]
    assert sum(len(c["requests"]) for c in data["cells"]) == sum(
        len(c.requests) for c in result.cells
    )
    with (tmp_path / "cells.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == CELL_COLUMNS and len(rows) == 4
    assert rows[0]["spec_mean_acceptance_length"] == "2.0"
    with (tmp_path / "requests.csv").open() as f:
        reqs = list(csv.DictReader(f))
    assert list(reqs[0]) == REQUEST_COLUMNS
    assert len(reqs) == sum(len(c.requests) for c in result.cells)
    for key in ("throughput_png", "ttft_png", "acceptance_png"):
        assert written[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3
    assert "<th>Aggregate tok/s</th>" in html and "http://" in html


def test_read_json_rejects_other_files(tmp_path: Path) -> None:
    from deskside.errors import UsageError

    (tmp_path / "x.json").write_text('{"schema_version": "other/9"}')
    with pytest.raises(UsageError, match=r"not a deskside\.bench/1 result"):
        read_json(tmp_path / "x.json")


def slowed(result: BenchResult, factor: float, jitter: float = 0.0) -> BenchResult:
    """A copy whose decode is ``factor`` times slower (chunk times stretched after TTFT);
    ``jitter`` alternately stretches requests by +-jitter to make noise."""
    copy = result.model_copy(deep=True)
    for cell in copy.cells:
        for i, r in enumerate(cell.requests):
            if r.ttft_s is None or r.e2e_s is None:
                continue
            f = factor * (1 + (jitter if i % 2 else -jitter))
            r.chunk_offsets_s = [r.ttft_s + (t - r.ttft_s) * f for t in r.chunk_offsets_s]
            r.e2e_s = r.chunk_offsets_s[-1]
        from deskside.bench.metrics import cell_metrics

        cell.metrics = cell_metrics(cell.requests, cell.concurrency)
    return copy


def steady(result: BenchResult) -> BenchResult:
    """`result` with every request's chunks on an exact schedule (TTFT 50 ms, then one
    chunk per 4 ms): the live server's timings vary with the machine's load, and a noise
    estimate must only see the noise a test puts in."""
    copy = result.model_copy(deep=True)
    for cell in copy.cells:
        for r in cell.requests:
            if r.ttft_s is None or r.e2e_s is None:
                continue
            r.ttft_s = 0.05
            r.chunk_offsets_s = [0.05 + 0.004 * i for i in range(len(r.chunk_offsets_s))]
            r.e2e_s = r.chunk_offsets_s[-1]
        from deskside.bench.metrics import cell_metrics

        cell.metrics = cell_metrics(cell.requests, cell.concurrency)
    return copy


def test_compare_flags_regressions_beyond_noise(result: BenchResult) -> None:
    result = steady(result)
    same = compare(result, result)
    assert same.regressions == []
    assert {r.verdict for r in same.rows} == {"below threshold"}
    worse = compare(result, slowed(result, 1.5))
    decode = [r for r in worse.rows if r.metric == "decode_tok_s"]
    assert decode and all(r.verdict == "regression" for r in decode)
    assert all(r.change is not None and r.change < -0.3 for r in decode)
    better = compare(slowed(result, 1.5), result)
    assert all(r.verdict == "improvement" for r in better.rows if r.metric == "decode_tok_s")
    tiny = compare(result, slowed(result, 1.01))
    assert all(r.verdict == "below threshold" for r in tiny.rows if r.metric == "decode_tok_s")
    noisy = compare(result, slowed(result, 1.1, jitter=0.9))
    assert any(r.verdict == "within noise" for r in noisy.rows if r.metric == "decode_tok_s")
    agg = [r for r in worse.rows if r.metric == "aggregate_tok_s"]
    assert agg and all(r.note and "no noise estimate" in r.note for r in agg)


def test_compare_missing_cells(result: BenchResult) -> None:
    fewer = result.model_copy(deep=True)
    fewer.cells = fewer.cells[:2]
    rows = [r for r in compare(result, fewer).rows if r.verdict == "missing"]
    assert len(rows) == 2 and rows[0].note == "only in A"


runner = CliRunner()


def test_cli_json_and_out(server: ThreadedServer, tmp_path: Path) -> None:
    args = ["bench", "--url", server.url, "--prompt-lens", "16", "--concurrency", "1,2"]
    args += ["--max-tokens", "6", "--requests", "4", "--out", str(tmp_path / "run"), "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["schema_version"] == SCHEMA_VERSION
    assert [c["concurrency"] for c in data["cells"]] == [1, 2]
    assert (tmp_path / "run" / "report.html").is_file()
    table = runner.invoke(
        app,
        [
            "bench",
            "--url",
            server.url,
            "--prompt-lens",
            "16",
            "--concurrency",
            "1",
            "--max-tokens",
            "4",
            "--no-metrics",
        ],
    )
    assert table.exit_code == 0, table.output
    assert "Aggregate" in table.stdout and "Decode" in table.stdout


def test_cli_compare(result: BenchResult, tmp_path: Path) -> None:
    result = steady(result)
    write_all(result, tmp_path / "a")
    write_all(slowed(result, 2.0), tmp_path / "b")
    res = runner.invoke(
        app, ["bench", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]
    )
    assert res.exit_code == 1, res.output
    assert json.loads(res.stdout)["regressions"] >= 4
    ok = runner.invoke(app, ["bench", "compare", str(tmp_path / "a"), str(tmp_path / "a")])
    assert ok.exit_code == 0 and "0 regression(s)" in ok.stdout


def test_cli_user_errors() -> None:
    res = runner.invoke(app, ["bench", "--json"])
    assert res.exit_code == 2
    assert json.loads(res.stdout)["message"] == "no server to bench"
    res = runner.invoke(app, ["bench", "--url", "http://127.0.0.1:9", "--json"])
    assert res.exit_code == 4 and "cannot reach" in res.stdout
    res = runner.invoke(app, ["bench", "--url", "http://x", "--prompt-lens", "1,a"])
    assert res.exit_code == 2
    res = runner.invoke(app, ["bench", "--url", "http://x", "--endpoint", "responses"])
    assert res.exit_code == 2

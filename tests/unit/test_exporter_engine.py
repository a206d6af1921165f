"""Engine progress: parsing vLLM's /metrics, seconds since the last token with an injected
clock, the HTTP fetch through httpx.MockTransport, and the running-engine lookup."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from deskside.exporter import engine
from deskside.exporter.engine import EngineReading, HttpFetch, Progress, parse_engine, read_engine
from deskside.exporter.running import EngineFinder, find_engine

from .exporter_cases import ENGINE_METRICS, ENGINE_PID, PROC, environ_value, exposition_sample_sum


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reading(tokens: float, running: float) -> EngineReading:
    return EngineReading(up=True, tokens=tokens, running=running)


def test_parse_the_recorded_exposition() -> None:
    text = ENGINE_METRICS.read_text()
    r = parse_engine(text)
    assert r.up
    assert r.tokens == exposition_sample_sum(text, "vllm:generation_tokens_total")
    assert r.running == exposition_sample_sum(text, "vllm:num_requests_running")
    assert r.vllm_version is None  # vllm:cache_config_info states no version


def test_samples_are_summed_over_engines() -> None:
    text = (
        "# TYPE vllm:generation_tokens counter\n"
        'vllm:generation_tokens_total{engine="0",model_name="m"} 10.0\n'
        'vllm:generation_tokens_total{engine="1",model_name="m"} 5.0\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 2.0\n'
    )
    r = parse_engine(text)
    assert (r.tokens, r.running) == (15.0, 3.0)


def test_garbage_is_up_without_figures() -> None:
    r = parse_engine("this is not {an exposition\n")
    assert r.up and r.tokens is None and r.running is None


def test_seconds_since_last_token_with_a_clock() -> None:
    clock = Clock()
    p = Progress(clock)
    assert p.observe(reading(100, 2)) == 0.0  # the first sample starts the clock
    clock.now += 15
    assert p.observe(reading(100, 2)) == 15.0  # no new token for 15 s, requests running
    clock.now += 15
    assert p.observe(reading(100, 2)) == 30.0
    clock.now += 5
    assert p.observe(reading(140, 2)) == 0.0  # tokens again
    clock.now += 10
    assert p.observe(reading(140, 2)) == 10.0
    clock.now += 10
    assert p.observe(reading(140, 0)) == 0.0  # idle is not stuck
    clock.now += 10
    assert p.observe(reading(140, 1)) == 30.0  # a request arrives; the counter stood still
    clock.now += 1
    assert p.observe(reading(3, 1)) == 0.0  # a restarted engine's counter counts as a change


def test_engine_down_has_no_progress() -> None:
    clock = Clock()
    p = Progress(clock)
    assert p.observe(EngineReading(up=False)) is None
    assert p.observe(EngineReading(up=True)) is None  # answered without vLLM's series


def test_once_takes_no_second_sample() -> None:
    p = Progress(Clock(), once=True)
    assert p.observe(reading(100, 0)) == 0.0
    assert Progress(Clock(), once=True).observe(reading(100, 3)) is None


def test_http_fetch_through_a_mock_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    text = ENGINE_METRICS.read_text()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=text)
        return httpx.Response(404)

    real_client = httpx.Client

    def client(**kwargs: object) -> httpx.Client:
        assert kwargs["timeout"] == engine.TIMEOUT_SECONDS
        return real_client(transport=httpx.MockTransport(handler))

    monkeypatch.setattr(httpx, "Client", client)
    fetch = engine.HttpFetch()
    assert fetch("http://head.test:8888/metrics") == text
    assert fetch("http://head.test:8888/other") is None
    r = read_engine("http://head.test:8888/metrics", fetch)
    assert r.up and r.tokens == exposition_sample_sum(text, "vllm:generation_tokens_total")


def test_refused_connection_is_fast_and_down() -> None:
    import socket
    import time

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    assert engine.HttpFetch()(f"http://127.0.0.1:{port}/metrics") is None
    assert time.perf_counter() - t0 < 1.0


def test_find_the_engine_process() -> None:
    found = find_engine(PROC / "gb10-head", "dual-spark-deepseek-v4-flash", "ai1")
    assert found is not None
    assert found.pid == ENGINE_PID  # the engine, not its worker (same start), nor the proxy
    assert found.env["NCCL_IB_GID_INDEX"] == environ_value(
        "gb10-head", ENGINE_PID, "NCCL_IB_GID_INDEX"
    )
    assert find_engine(PROC / "gb10-head", "dual-spark-deepseek-v4-flash", "ai2") is None
    assert find_engine(PROC / "gb10-head", "other-recipe", "ai1") is None
    assert find_engine(PROC / "gb10-head-idle", "dual-spark-deepseek-v4-flash", "ai1") is None
    assert find_engine(PROC / "does-not-exist", "dual-spark-deepseek-v4-flash", "ai1") is None


def test_unreadable_and_odd_processes_are_skipped(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "proc"
    shutil.copytree(PROC / "gb10-head", root)
    (root / "self").mkdir()  # not a pid
    (root / "77").mkdir()  # vanished: no stat, no environ
    (root / "78").mkdir()
    (root / "78" / "stat").write_text("78 (x) S 1")  # malformed
    environ = root / str(ENGINE_PID) / "environ"
    environ.unlink()
    environ.mkdir()  # not a regular file: skipped, the worker (same tag) is found
    found = find_engine(root, "dual-spark-deepseek-v4-flash", "ai1")
    assert found is not None and found.pid == 2904


def test_the_finder_remembers_the_engine_while_it_lives(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "proc"
    shutil.copytree(PROC / "gb10-head", root)
    finder = EngineFinder(root, "dual-spark-deepseek-v4-flash", "ai1")
    first = finder()
    assert first is not None and first.pid == ENGINE_PID
    (root / "2904").rename(root / "2904-gone")
    assert finder() is first  # not re-scanned
    shutil.rmtree(root / str(ENGINE_PID))
    assert finder() is None  # the engine exited


# --------------------------------------------------------------------------- sysfs per scrape


@pytest.mark.parametrize(
    "case", ["gb10-head", "gb10-worker", "no-v2", "two-matches", "port-down", "empty-files"]
)
def test_scrape_source_reads_what_dirsource_reads(case: str) -> None:
    from deskside.exporter.roce import ScrapeSource
    from deskside.fabric.sysfs import DirSource, read_snapshot

    from .exporter_cases import SYSFS

    root = SYSFS / case / "sys"
    assert (
        read_snapshot(ScrapeSource(root)).model_dump()
        == read_snapshot(DirSource(root)).model_dump()
    )


def test_scrape_source_refuses_links_out_of_the_tree(tmp_path: Path) -> None:
    import shutil

    from deskside.exporter.roce import ScrapeSource
    from deskside.fabric.sysfs import SysfsTreeError

    from .exporter_cases import SYSFS

    root = tmp_path / "sys"
    shutil.copytree(SYSFS / "gb10-head" / "sys", root, symlinks=True)
    secret = tmp_path / "secret"
    secret.write_text("0000:0000:0000:0000:0000:ffff:c0a8:6401\n")
    gid = root / "class/infiniband/rocep1s0f0/ports/1/gids/9"
    gid.unlink()
    gid.symlink_to(secret)
    with pytest.raises(SysfsTreeError, match="leading out of the tree"):
        ScrapeSource(root).read("class/infiniband/rocep1s0f0/ports/1/gids/9")


@pytest.mark.parametrize(
    ("mode", "reason"), [("silent", "deadline"), ("huge", "too_large"), ("garbage", "transport")]
)
def test_a_failed_engine_scrape_says_why(mode: str, reason: str) -> None:
    """Against a real hostile server: down, with the reason the exposition shows."""
    from tests.hostile_http import hostile_server

    fetch = HttpFetch()
    try:
        with hostile_server(mode) as url:
            r = read_engine(f"{url}/metrics", fetch)
    finally:
        fetch.close()
    assert not r.up and r.error == reason


def test_a_refused_engine_scrape_says_so() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fetch = HttpFetch()
    try:
        r = read_engine(f"http://127.0.0.1:{port}/metrics", fetch)
    finally:
        fetch.close()
    assert not r.up and r.error == "refused"

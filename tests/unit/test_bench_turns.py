"""Multi-turn conversations against the synthetic server: every turn resends the history
with the model's actual replies, and the server's prefix-cache counters (and the usage's
cached tokens) grow with the turns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import pairwise

import pytest
from rich.console import Console
from typer.testing import CliRunner

from deskside.bench.models import BenchConfig, RequestRecord
from deskside.bench.prefix_check import prefix_cache_over_turns
from deskside.bench.report import print_result
from deskside.bench.runner import run_bench
from deskside.bench.synthetic import Behaviour, SentRequest, ThreadedServer, start_in_thread
from deskside.cli.app import app

# 16-token blocks; 6 chat template tokens; a turn's user message is 64 - 6 = 58 words
PROMPT, OUT, BLOCK = 64, 16, 16


@pytest.fixture
def server() -> Iterator[ThreadedServer]:
    s = start_in_thread(Behaviour(ttft_s=0.01, chunk_interval_s=0.002))
    yield s
    s.stop()


def _by_id(server: ThreadedServer) -> dict[str, SentRequest]:
    return {s.id: s for s in server.server.sent}


def test_turns_resend_history_and_hit_the_prefix_cache(server: ThreadedServer) -> None:
    config = BenchConfig(
        url=server.url,
        prompt_lens=[PROMPT],
        concurrency=[2],
        conversations=2,
        turns=3,
        max_tokens=OUT,
    )
    result = run_bench(config)
    (cell,) = result.cells
    measured = [r for r in cell.requests if not r.warmup]
    assert len(measured) == 6 and all(r.ok for r in measured)
    assert cell.metrics.prompt_tokens_exact is True  # every history counted before sending
    sent = _by_id(server)
    convs: dict[int, list[RequestRecord]] = {}
    for r in sorted(measured, key=lambda r: (r.conversation or 0, r.turn or 0)):
        convs.setdefault(r.conversation or 0, []).append(r)
    assert sorted(convs) == [0, 1]
    for turns in convs.values():
        assert [r.turn for r in turns] == [1, 2, 3]
        for prev, this in pairwise(turns):
            reply = prev.reply
            assert reply and len(reply.split()) == OUT  # the model's actual reply, captured
            assert reply.strip() in sent[this.response_id or ""].prompt
            # the previous prompt is this one's prefix: its whole blocks are cached
            assert this.cached_tokens == (prev.prompt_tokens or 0) // BLOCK * BLOCK
        lengths = [r.prompt_tokens for r in turns]
        assert lengths == [PROMPT, 2 * PROMPT - 6 + OUT, 3 * PROMPT - 12 + 2 * OUT]
    rows = cell.turns
    assert [t.turn for t in rows] == [1, 2, 3]
    hits = [t.server_prefix_hits for t in rows]
    assert hits == [0.0, 2 * 64.0, 2 * 128.0]  # grows with the turns, per the counters
    assert [t.cached_tokens for t in rows] == [0, 128, 256]  # and per the usage
    assert [t.server_prefix_queries for t in rows] == [float(t.prompt_tokens) for t in rows]
    w = cell.server
    assert w is not None and w.prefix_cache_hits == 384.0
    assert w.prefix_cache_queries == float(cell.metrics.prompt_tokens)
    assert w.output_tokens_match is True
    console = Console(record=True, width=200)
    print_result(console, result)
    assert "Multi-turn: the prefix cache per turn" in console.export_text()


def test_completions_history_is_one_text(server: ThreadedServer) -> None:
    config = BenchConfig(
        url=server.url,
        endpoint="completions",
        prompt_lens=[40],
        concurrency=[1],
        conversations=1,
        turns=2,
        max_tokens=8,
        warmup=0,
    )
    (cell,) = run_bench(config).cells
    first, second = (r for r in cell.requests if not r.warmup)
    assert first.reply and first.reply.strip() in _by_id(server)[second.response_id or ""].prompt
    assert second.prompt_tokens == 40 + 39 + 8  # BOS once, both user texts, the reply
    assert cell.metrics.prompt_tokens_exact is True
    assert cell.turns[1].server_prefix_hits == 32.0


def test_a_failed_turn_ends_its_conversation() -> None:
    s = start_in_thread(Behaviour(ttft_s=0.01, chunk_interval_s=0.002, fail_every_n=3))
    try:
        config = BenchConfig(
            url=s.url, prompt_lens=[32], concurrency=[2], turns=3, max_tokens=4, warmup=0
        )
        (cell,) = run_bench(config).cells
    finally:
        s.stop()
    # requests 1, 2 (turn 1) pass, request 3 (turn 2) fails: that conversation stops there
    assert [(t.turn, t.requests, t.succeeded) for t in cell.turns] == [
        (1, 2, 2),
        (2, 2, 1),
        (3, 1, 1),
    ]


def test_prefix_cache_over_turns_helper(server: ThreadedServer) -> None:
    check = prefix_cache_over_turns(server.url, prompt_len=48, max_tokens=8)
    # 2 conversations: turn 2 hits 48 each, turn 3 the 48 + 42 + 8 = 98 -> 96 each
    assert check.per_turn_hits == [0.0, 96.0, 192.0]
    assert check.per_turn_usage_cached == [0, 96, 192]
    assert check.cached_tokens == 288.0 and check.queried_tokens is not None
    assert check.result.config.turns == 3 and check.result.config.conversations == 2


def test_cli_turns(server: ThreadedServer) -> None:
    args = ["bench", "--url", server.url, "--prompt-lens", "32", "--concurrency", "2"]
    args += ["--turns", "2", "--conversations", "3", "--max-tokens", "4", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    cell = json.loads(res.stdout)["cells"][0]
    assert [(t["turn"], t["requests"]) for t in cell["turns"]] == [(1, 3), (2, 3)]
    assert all("reply" not in r for r in cell["requests"])  # replies are not written out


def test_conversations_too_long_for_the_model_are_skipped() -> None:
    s = start_in_thread(Behaviour(ttft_s=0.01, chunk_interval_s=0.002, max_model_len=200))
    try:
        config = BenchConfig(
            url=s.url, prompt_lens=[32, 64], concurrency=[1], turns=3, max_tokens=16
        )
        result = run_bench(config)
    finally:
        s.stop()
    assert [c.prompt_len for c in result.cells] == [32]  # 3 x (32 + 16) = 144 fits
    assert "3 turns exceeds max_model_len 200" in result.notes[0]
    with pytest.raises(ValueError, match="drop the duration"):
        BenchConfig(url=s.url, turns=2, duration_s=5.0)

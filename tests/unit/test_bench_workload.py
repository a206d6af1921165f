"""Prompts of an exact token length, unique per request; request bodies."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from deskside.bench.models import BenchConfig
from deskside.bench.workload import (
    WORDS,
    LocalTokenCounter,
    PromptError,
    build_prompt,
    matrix,
    prompt_words,
    request_body,
    stream_request,
    words_needed,
)
from deskside.tiny import write_tiny_model


class UnevenCounter:
    """Additive like BPE on space-split words, with uneven costs: words of 6+ letters cost
    3 tokens, 4-5 letters 2, shorter 1; the template adds 7."""

    method = "fake"

    def __init__(self) -> None:
        self.calls = 0

    async def count(self, text: str) -> int:
        self.calls += 1
        cost = sum(3 if len(w) >= 6 else 2 if len(w) >= 4 else 1 for w in text.split())
        return 7 + cost


@pytest.mark.parametrize("target", [8, 9, 64, 256, 2048, 8192, 32768])
def test_exact_length_with_uneven_words(target: int) -> None:
    counter = UnevenCounter()
    words = prompt_words(0, f"t{target}", words_needed(target))
    prompt = asyncio.run(build_prompt(counter, target, words))
    assert prompt.exact, (prompt.tokens, target)
    assert asyncio.run(counter.count(prompt.text)) == target
    assert counter.calls <= 20


def test_too_short_for_the_template() -> None:
    with pytest.raises(PromptError, match="shorter than the fixed template"):
        asyncio.run(build_prompt(UnevenCounter(), 7, list(WORDS)))


def test_prompts_are_unique_per_key_and_reproducible() -> None:
    a = prompt_words(0, "256:1:r0", 32)
    assert a == prompt_words(0, "256:1:r0", 32)
    assert a[:8] != prompt_words(0, "256:1:r1", 32)[:8]
    assert a[:8] != prompt_words(1, "256:1:r0", 32)[:8]


def test_local_tokenizer_counts_like_the_tiny_model(tmp_path: Path) -> None:
    model = write_tiny_model("llama", tmp_path / "m")
    chat = LocalTokenCounter(model, "chat")
    plain = LocalTokenCounter(model / "tokenizer.json", "completions")
    assert chat.chat_template_used
    for target in (64, 300):
        for counter in (chat, plain):
            words = prompt_words(3, f"local{target}", words_needed(target))
            prompt = asyncio.run(build_prompt(counter, target, words))
            assert prompt.exact, (counter.method, prompt.tokens, target)
    # the chat template adds tokens around the same text
    assert asyncio.run(chat.count("hello")) > asyncio.run(plain.count("hello"))


def test_matrix_order_and_defaults() -> None:
    config = BenchConfig(url="http://x")
    cells = matrix(config)
    assert [(c.prompt_len, c.concurrency) for c in cells[:5]] == [
        (256, 1),
        (256, 2),
        (256, 4),
        (256, 6),
        (2048, 1),
    ]
    assert len(cells) == 16
    assert config.requests_for(1) == 4 and config.requests_for(6) == 12
    assert config.warmup_for(4) == 4


def test_request_bodies() -> None:
    config = BenchConfig(url="http://x", endpoint="completions", extra_body={"top_k": 1})
    body = request_body(config, "m", "hello", 32)
    assert body == {
        "model": "m",
        "prompt": "hello",
        "max_tokens": 32,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "top_k": 1,
    }
    chat = BenchConfig(url="http://x", ignore_eos=False)
    from deskside.bench.workload import Prompt

    req = stream_request(chat, "m", 3, Prompt("hi there", 12, 12), 8, warmup=True)
    sent = json.loads(req.body)
    assert sent["messages"] == [{"role": "user", "content": "hi there"}]
    assert "ignore_eos" not in sent
    assert (req.path, req.chat, req.warmup, req.prompt_len) == (
        "/v1/chat/completions",
        True,
        True,
        12,
    )

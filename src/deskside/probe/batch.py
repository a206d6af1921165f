"""Batch invariance: the greedy output of one prompt, alone, equals its output while other
requests share the engine's batch (among them copies of the same prompt, and a longer
prompt). vLLM makes no such promise by default (its `VLLM_BATCH_INVARIANT` mode exists for
that reason): kernels may reduce in a different order for a different batch shape, and a
near-tie between two tokens then flips. Speculative decoding takes part when the recipe
turns it on: every request's drafts are verified in the same batch."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deskside.probe.result import ProbeResult, clip, failed, passed

NAME = "batch-invariance"
PROMPT = "Speculative decoding lets a cheap draft propose several tokens that the target"
OTHER_PROMPTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Tensor parallelism splits every layer across devices: attention heads and the "
    "columns of each projection are divided, and an all-reduce joins the partial results "
    "after each block. Pipeline parallelism instead gives each device a contiguous range "
    "of layers. " * 3,
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 16 32 64",
)
MAX_TOKENS = 32
OTHERS = 5  # at most; fewer when max_num_seqs leaves less room beside the probe
OTHER_MAX_TOKENS = 8 * MAX_TOKENS  # long enough to outlast the probe; cut when it ends


def other_count(max_num_seqs: int | None) -> int:
    """How many requests run beside the probe: all fit in one batch with it."""
    if max_num_seqs is None:
        return OTHERS
    return max(0, min(OTHERS, max_num_seqs - 1))


def other_prompts(n: int) -> list[str]:
    """`n` prompts: two copies of the probe's own prompt first (identical rows in one
    batch), then different ones of different lengths."""
    pool = [PROMPT, PROMPT, *OTHER_PROMPTS]
    return [pool[i % len(pool)] for i in range(n)]


def completion_body(
    model: str, prompt: str, max_tokens: int, stream: bool = False
) -> dict[str, Any]:
    """A greedy completion of exactly `max_tokens` tokens, with their ids and logprobs."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "logprobs": 1,
        "return_token_ids": True,
    }
    if stream:
        body["stream"] = True
    return body


@dataclass(frozen=True)
class Answer:
    """The tokens of one greedy completion."""

    text: str
    token_ids: list[int] | None
    tokens: list[str] | None  # the token texts, from the logprobs
    logprobs: list[float] | None

    @property
    def sequence(self) -> list[Any]:
        """What is compared: token ids when the engine returns them, else token texts,
        else the text."""
        if self.token_ids is not None:
            return list(self.token_ids)
        if self.tokens is not None:
            return list(self.tokens)
        return [self.text]


def read_completion(body: Mapping[str, Any]) -> Answer:
    """The first choice of a /v1/completions answer; ValueError when it has none."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the answer has no choices")
    choice = choices[0]
    ids = choice.get("token_ids")
    lp = choice.get("logprobs") or {}
    tokens = lp.get("tokens") if isinstance(lp, dict) else None
    values = lp.get("token_logprobs") if isinstance(lp, dict) else None
    return Answer(
        text=str(choice.get("text") or ""),
        token_ids=[int(i) for i in ids] if isinstance(ids, list) else None,
        tokens=[str(t) for t in tokens] if isinstance(tokens, list) else None,
        logprobs=[float(v) for v in values if v is not None] if isinstance(values, list) else None,
    )


@dataclass(frozen=True)
class Overlap:
    """How the other requests ran around the batched probe: `running` of `others` had
    produced a token before it was sent and were still producing when its answer came."""

    others: int
    running: int
    identical: int  # of the others, how many had the probe's own prompt
    errors: Sequence[str] = ()


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _token(answer: Answer, i: int) -> str:
    parts = []
    if answer.token_ids is not None and i < len(answer.token_ids):
        parts.append(str(answer.token_ids[i]))
    if answer.tokens is not None and i < len(answer.tokens):
        parts.append(repr(answer.tokens[i]))
    if answer.logprobs is not None and i < len(answer.logprobs):
        parts.append(f"logprob {answer.logprobs[i]:.6g}")
    return " ".join(parts) or "-"


def logprob_note(a: Answer, b: Answer) -> str:
    if not a.logprobs or not b.logprobs or len(a.logprobs) != len(b.logprobs):
        return ""
    diff = max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True))
    return "; logprobs identical" if diff == 0 else f"; logprobs differ by up to {diff:.2g}"


def judge(
    alone: Answer, batched: Answer, overlap: Overlap, again: Answer | None = None
) -> ProbeResult:
    """PASS when the batched answer's tokens equal the lone one's and every other request
    ran the whole time; `again` (a second lone answer, asked for after a difference)
    tells nondeterminism from batch variance."""
    if overlap.errors:
        return failed(
            NAME, "the requests beside the probe failed: " + clip("; ".join(overlap.errors))
        )
    if overlap.running < overlap.others:
        return failed(
            NAME,
            f"only {overlap.running} of the {overlap.others} other requests were running "
            "for the whole batched probe: nothing to compare",
        )
    beside = f"{overlap.others} running requests ({overlap.identical} with the same prompt)"
    n = len(alone.sequence)
    at = first_difference(alone.sequence, batched.sequence)
    if at is None:
        what = "token ids" if alone.token_ids is not None else "tokens"
        return passed(
            NAME,
            f"{n} greedy {what} identical alone and beside {beside}" + logprob_note(alone, batched),
        )
    detail = (
        f"greedy output differs at token {at} of {n} beside {beside}: alone "
        f"{_token(alone, at)}, batched {_token(batched, at)}"
    )
    if again is not None:
        if first_difference(alone.sequence, again.sequence) is None:
            detail += "; alone twice gives the same tokens (batch variance)"
        else:
            detail += "; alone twice differs too (not deterministic even without a batch)"
    return failed(NAME, detail)


def stream_chunk(line: str) -> tuple[bool, bool]:
    """(carries a token, is the end) for one line of a completion's SSE stream."""
    if not line.startswith("data:"):
        return False, False
    data = line[5:].strip()
    if data == "[DONE]":
        return False, True
    try:
        chunk = json.loads(data)
        choice = chunk["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return False, False
    return True, choice.get("finish_reason") is not None

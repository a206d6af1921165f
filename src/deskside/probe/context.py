"""Long context: a prompt that fills max_model_len (with the answer's tokens) is served.
The prompt is token ids counted with the engine's own /tokenize, so its length is exact;
a fresh prefix per run keeps the prefix cache from serving it. vLLM accepts prompt +
max_tokens up to max_model_len and refuses a longer prompt with "This model's maximum
context length is N tokens" (vllm/entrypoints/openai: input length validation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deskside.probe.result import ProbeResult, clip, error_message, failed, passed

NAME = "long-context"
MAX_TOKENS = 8
FILLER = "Once upon a time, in a lab full of humming machines, two small computers talked. "


def tokenize_body(model: str, text: str, special: bool) -> dict[str, Any]:
    return {"model": model, "prompt": text, "add_special_tokens": special}


def read_tokenize(body: object) -> tuple[list[int], int | None]:
    """(token ids, the engine's max_model_len when it says) of a /tokenize answer;
    ValueError when it has no tokens."""
    if not isinstance(body, dict) or not isinstance(body.get("tokens"), list) or not body["tokens"]:
        raise ValueError(f"/tokenize gave no tokens: {clip(body, 80)}")
    limit = body.get("max_model_len")
    return [int(t) for t in body["tokens"]], int(limit) if isinstance(limit, int) else None


def long_prompt(head: Sequence[int], filler: Sequence[int], length: int) -> list[int]:
    """`head` then `filler` repeated, exactly `length` ids."""
    if length < len(head) or not filler:
        raise ValueError(f"max_model_len leaves {length} prompt tokens: too few to probe")
    body = list(filler) * ((length - len(head)) // len(filler) + 1)
    return [*head, *body][:length]


def completion_body(model: str, prompt: Sequence[int]) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": list(prompt),
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
    }


def judge(
    prompt_len: int, max_model_len: int, status: int, body: object, seconds: float
) -> ProbeResult:
    sent = f"{prompt_len:,} prompt + {MAX_TOKENS} answer tokens = max_model_len {max_model_len:,}"
    if status != 200 or not isinstance(body, dict):
        return failed(NAME, f"{sent}: HTTP {status}: {clip(error_message(body))}")
    usage = body.get("usage") or {}
    prompt_tokens = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens") or 0
    if prompt_tokens != prompt_len:
        return failed(NAME, f"{sent}: the engine counted {prompt_tokens} prompt tokens")
    if completion <= 0:
        return failed(NAME, f"{sent}: no token came back")
    return passed(NAME, f"{sent}: served, {completion} tokens back in {seconds:.1f} s")

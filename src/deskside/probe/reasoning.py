"""Stop strings and reasoning: with a reasoning parser, a recipe may ask the engine to leave
a client's stop strings dormant until the reasoning ends (`engine.env`
DSPARK_SUPPRESS_STOPS_IN_REASONING, read by the DSpark engine image; upstream vLLM checks
stop strings over the whole output, reasoning included: `check_stop_strings` in
vllm/v1/engine/detokenizer.py). The probe asks once without a stop string, picks a word of
the reasoning it got, asks again with that word as the stop string, and checks that the
answer went past it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from deskside.probe.result import ProbeResult, clip, error_message, failed, passed, skipped
from deskside.probe.target import STOPS_AFTER_REASONING_ENV, EngineTraits

NAME = "stop-in-reasoning"
MAX_TOKENS = 64
QUESTION = "How many minutes are in a day? Think it through step by step, then answer."
# a word: letters or digits, no markup that could touch the reasoning delimiters
WORD = re.compile(r"[^\W_]{3,}")


def unconfigured(traits: EngineTraits) -> ProbeResult | None:
    """SKIPPED when there is nothing to check; None when the probe applies."""
    if traits.reasoning_parser is None:
        return skipped(NAME, "no reasoning parser (no --reasoning-parser in engine.extra_args)")
    if not traits.stops_after_reasoning:
        return skipped(
            NAME,
            f"reasoning parser {traits.reasoning_parser}, but the recipe does not ask for "
            f"stop strings to wait for the end of the reasoning (engine.env "
            f"{STOPS_AFTER_REASONING_ENV})",
        )
    return None


def chat_body(model: str, stop: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "seed": 0,
    }
    if stop is not None:
        body["stop"] = [stop]
    return body


@dataclass(frozen=True)
class Said:
    reasoning: str
    content: str
    finish_reason: str | None


def read_chat(body: object) -> Said:
    """The reasoning (vLLM's `reasoning`, older `reasoning_content`) and the answer of a
    chat completion; ValueError when it has no message."""
    try:
        choice = body["choices"][0]  # type: ignore[index]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise ValueError("the answer has no message") from None
    reasoning = message.get("reasoning") or message.get("reasoning_content") or ""
    return Said(str(reasoning), str(message.get("content") or ""), choice.get("finish_reason"))


def pick_stop(reasoning: str) -> tuple[str, int] | None:
    """A word of the reasoning, from its middle, and where it first occurs (never at the
    very start: the answer must have begun before the stop string can end it)."""
    words = [m for m in WORD.finditer(reasoning) if reasoning.find(m.group()) == m.start() > 0]
    if not words:
        return None
    m = words[len(words) // 2]
    return m.group(), m.start()


def no_reasoning(first: Said) -> ProbeResult:
    return skipped(
        NAME,
        f"the model wrote no reasoning with a word in it (answer {clip(first.content, 60)!r}): "
        "nowhere to put a stop string",
    )


def judge(stop: str, at: int, first: Said, status: int, body: object) -> ProbeResult:
    """The second answer, asked with `stop` (first found at character `at` of the first
    answer's reasoning)."""
    where = f"stop string {stop!r} (character {at} of the reasoning)"
    if status != 200:
        return failed(NAME, f"with {where}: HTTP {status}: {clip(error_message(body))}")
    try:
        second = read_chat(body)
    except ValueError as exc:
        return failed(NAME, f"with {where}: {exc}")
    if stop in second.reasoning:
        return passed(
            NAME,
            f"{where} did not end the answer: {len(second.reasoning)} characters of reasoning, "
            f"{len(second.content)} of answer, finish_reason {second.finish_reason}",
        )
    if second.finish_reason == "stop" and first.reasoning.startswith(second.reasoning):
        return failed(
            NAME,
            f"{where} ended the answer inside the reasoning after {len(second.reasoning)} "
            "character(s), although the recipe asks stop strings to wait for its end",
        )
    return failed(
        NAME,
        f"with {where} the answer left the first one's path before reaching it (greedy "
        f"output not reproducible; finish_reason {second.finish_reason})",
    )

"""Tool calls: a request whose tool_choice forces a call ("required", then a named
function) comes back with tool calls whose `function.arguments` are JSON objects. vLLM
forces the call with structured outputs (a JSON schema of the call), so it holds even for
a model that never learned the tool format; it needs a --tool-call-parser
(vllm/entrypoints/openai/chat_completion: "tool_choice=... requires --tool-call-parser")."""

from __future__ import annotations

import json
from typing import Any

from deskside.probe.result import ProbeResult, clip, error_message, failed, passed, skipped
from deskside.probe.target import EngineTraits

NAME = "tool-calls"
FUNCTION = "get_weather"
TOOL = {
    "type": "function",
    "function": {
        "name": FUNCTION,
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris."},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}
MAX_TOKENS = 64
CHOICES: tuple[Any, ...] = ("required", {"type": "function", "function": {"name": FUNCTION}})


def unconfigured(traits: EngineTraits) -> ProbeResult | None:
    """SKIPPED when the engine has no tool-call parser; None when it has one."""
    if traits.tool_call_parser is None:
        return skipped(
            NAME,
            "the engine has no tool support configured (no --tool-call-parser in "
            "engine.extra_args)",
        )
    return None


def tool_body(model: str, tool_choice: Any, reasoning: bool = False) -> dict[str, Any]:
    """The forced request. With a reasoning parser the call is asked for without reasoning
    (the chat templates' `thinking` / `enable_thinking` switches): vLLM forces the call only
    once the reasoning has ended."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "What is the weather in Paris? Use the tool."}],
        "tools": [TOOL],
        "tool_choice": tool_choice,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
    }
    if reasoning:
        body["chat_template_kwargs"] = {"thinking": False, "enable_thinking": False}
    return body


def choice_text(tool_choice: Any) -> str:
    return (
        f"tool_choice {tool_choice!r}"
        if isinstance(tool_choice, str)
        else f"tool_choice {FUNCTION} (named)"
    )


def refused_choice(status: int, body: object) -> bool:
    """The engine refused the request because of its tool_choice (it cannot force one)."""
    return status == 400 and "tool" in error_message(body).lower()


def arguments_problem(call: object) -> str | None:
    """Why a returned tool call's arguments are not a JSON object, or None."""
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return f"a tool call without a function: {clip(call, 80)}"
    fn = call["function"]
    raw = fn.get("arguments")
    name = fn.get("name")
    if not isinstance(raw, str):
        return f"{name}: arguments are {type(raw).__name__}, not a JSON string"
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        return f"{name}: arguments are not JSON ({exc.msg} at {exc.pos}): {clip(raw, 60)!r}"
    if not isinstance(parsed, dict):
        return f"{name}: arguments are a JSON {type(parsed).__name__}, not an object"
    return None


def judge(tool_choice: Any, status: int, body: object) -> ProbeResult:
    """One forced request's answer."""
    asked = choice_text(tool_choice)
    if status != 200 or not isinstance(body, dict):
        return failed(NAME, f"{asked}: HTTP {status}: {clip(error_message(body))}")
    try:
        choice = body["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        return failed(NAME, f"{asked}: the answer has no message")
    calls = message.get("tool_calls") or []
    finish = choice.get("finish_reason")
    if not calls:
        why = (
            f"the answer ran to max_tokens {MAX_TOKENS} before the call closed"
            if finish == "length"
            else f"finish_reason {finish}"
        )
        text = message.get("content") or message.get("reasoning") or ""
        return failed(NAME, f"{asked}: no tool call came back ({why}): {clip(text, 60)!r}")
    problems = [p for c in calls if (p := arguments_problem(c)) is not None]
    if problems:
        return failed(NAME, f"{asked}: " + "; ".join(problems[:2]))
    first = calls[0]["function"]
    return passed(
        NAME,
        f"{asked}: {len(calls)} tool call(s), arguments JSON objects "
        f"({first.get('name')} {clip(first.get('arguments'), 60)})",
    )


def cannot_force(body: object) -> ProbeResult:
    """SKIPPED: the engine refused every way of forcing a call."""
    return skipped(NAME, f"the engine cannot force a tool call: {clip(error_message(body))}")

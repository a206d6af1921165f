"""Every served name answers at both doors with the door's key — the LiteLLM proxy with its
master key, the engine with its own key — and neither door answers without its key (nor
with a wrong one at the proxy). When no proxy fronts the engine, the engine has no key and
answers anyone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from deskside.probe.result import ProbeResult, clip, failed, passed

NAME = "names-and-keys"
Door = Literal["proxy", "engine"]
Key = Literal["master", "engine", "none", "wrong"]
WRONG_KEY = "sk-deskside-probe-wrong-key"
MAX_SHOWN = 3


def chat_body(model: str) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Reply with OK."}],
        "max_tokens": 2,
        "temperature": 0,
    }


@dataclass(frozen=True)
class Knock:
    """One request: which door, which name, which key."""

    door: Door
    name: str
    key: Key
    should_answer: bool

    def __str__(self) -> str:
        key = {
            "master": "master key",
            "engine": "engine key",
            "none": "no key",
            "wrong": "a wrong key",
        }
        return f"{self.name} at the {self.door} with {key[self.key]}"


def knocks(names: Sequence[str], behind_proxy: bool) -> list[Knock]:
    """The requests to send, in order."""
    out: list[Knock] = []
    for name in names:
        if behind_proxy:
            out += [
                Knock("proxy", name, "master", True),
                Knock("proxy", name, "none", False),
                Knock("proxy", name, "wrong", False),
                Knock("engine", name, "engine", True),
                Knock("engine", name, "none", False),
            ]
        else:  # no proxy: the engine has no key
            out.append(Knock("engine", name, "none", True))
    return out


@dataclass(frozen=True)
class Reply:
    """What a door said: the HTTP status (None when nothing answered) and whether the body
    carries a completion."""

    status: int | None
    completion: bool
    error: str = ""


def has_completion(body: object) -> bool:
    """A chat completion with at least one choice."""
    return isinstance(body, dict) and bool(body.get("choices"))


def problem(knock: Knock, reply: Reply) -> str | None:
    if reply.status is None:
        return f"{knock}: no answer ({reply.error})"
    if knock.should_answer:
        if reply.status != 200 or not reply.completion:
            return f"{knock}: HTTP {reply.status}, no completion {clip(reply.error, 80)}".rstrip()
        return None
    if reply.completion or reply.status < 400:
        return f"{knock}: answered (HTTP {reply.status}) instead of refusing"
    return None


def judge(
    results: Sequence[tuple[Knock, Reply]], names: Sequence[str], behind_proxy: bool
) -> ProbeResult:
    problems = [p for k, r in results if (p := problem(k, r)) is not None]
    if problems:
        more = f" (+{len(problems) - MAX_SHOWN} more)" if len(problems) > MAX_SHOWN else ""
        return failed(NAME, "; ".join(problems[:MAX_SHOWN]) + more)
    if not behind_proxy:
        return passed(NAME, f"{len(names)} names answered at the engine (no proxy, no key)")
    refusals = sorted({f"{k.door} {r.status}" for k, r in results if not k.should_answer})
    return passed(
        NAME,
        f"{len(names)} names answered through the proxy (master key) and the engine (its "
        f"key); refused without a key or with a wrong one ({', '.join(refusals)})",
    )

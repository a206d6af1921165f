"""One streamed response's server-sent events, as the bench client reads them.

After the first token, a chunk with no usage, error or finish reason is not parsed as JSON
(about 20 us each): a key pattern says whether it carries a token.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Keys whose presence needs the full parse: usage, errors, a finish reason.
SLOW = re.compile(rb'"usage":\s*\{|"error":|"finish_reason":\s*"')
# A generated token: non-empty text / content / reasoning, a tool call, or token ids.
TOKEN = re.compile(
    rb'"(?:text|content|reasoning_content|reasoning)":\s*"(?!")'
    rb'|"tool_calls":\s*\[\s*\{|"token_ids":\s*\[\s*\d'
)


class StreamSink:
    """Accumulates what one stream said. ``event`` runs once per SSE data payload.

    ``capture``: also keep the generated text (the reply a multi-turn conversation sends
    back): every event is then parsed in full."""

    __slots__ = (
        "capture",
        "chat",
        "chunks",
        "done_marker",
        "error",
        "finish_reason",
        "first",
        "response_id",
        "text",
        "usage",
    )

    def __init__(self, chat: bool, capture: bool = False) -> None:
        self.chat = chat
        self.capture = capture
        self.text: list[str] = []
        self.chunks: list[float] = []
        self.first: float | None = None
        self.usage: dict[str, Any] | None = None
        self.response_id: str | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.done_marker = False

    def event(self, payload: bytes, now: float) -> None:
        if payload == b"[DONE]":
            self.done_marker = True
            return
        if self.first is not None and not self.capture and SLOW.search(payload) is None:
            # After the first token, a chunk with no usage, error or finish reason only
            # matters for whether it carries a token. Parsing it with json.loads costs about
            # 20 us in situ (cold caches), most of the client's time per chunk; a key can
            # only match these patterns as a key (quotes inside JSON strings are escaped).
            if TOKEN.search(payload) is not None:
                self.chunks.append(now)
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            self.error = f"malformed stream event: {payload[:200]!r}"
            return
        if not isinstance(obj, dict):
            return
        error = obj.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else error
            self.error = f"server error in stream: {message}"
        usage = obj.get("usage")
        if usage:
            self.usage = usage
        choices = obj.get("choices")
        if not choices:
            return
        choice = choices[0]
        if self.chat:
            delta = choice.get("delta")
            carries = bool(
                delta
                and (
                    delta.get("content")
                    or delta.get("reasoning_content")
                    or delta.get("reasoning")
                    or delta.get("tool_calls")
                )
            )
        else:
            carries = bool(choice.get("text"))
        if not carries and choice.get("token_ids"):
            carries = True
        if carries and self.capture:
            piece = (delta or {}).get("content") if self.chat else choice.get("text")
            if isinstance(piece, str):
                self.text.append(piece)
        if carries:
            if self.first is None:
                self.first = now
                self.response_id = obj.get("id")
            self.chunks.append(now)
        finish = choice.get("finish_reason")
        if finish:
            self.finish_reason = finish

"""What one probe found: PASS, FAIL or SKIPPED, with a one-line why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from deskside.terminal import snippet

Verdict = Literal["PASS", "FAIL", "SKIPPED"]


@dataclass(frozen=True)
class ProbeResult:
    name: str
    result: Verdict
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "result": self.result, "detail": self.detail}


def passed(name: str, detail: str) -> ProbeResult:
    return ProbeResult(name, "PASS", detail)


def failed(name: str, detail: str) -> ProbeResult:
    return ProbeResult(name, "FAIL", detail)


def skipped(name: str, detail: str) -> ProbeResult:
    return ProbeResult(name, "SKIPPED", detail)


def clip(text: object, limit: int = 120) -> str:
    """`text` on one line, at most `limit` characters (for details)."""
    return snippet(text, limit)


def error_message(body: object) -> str:
    """The message of an OpenAI-style error body ({"error": {"message": ...}}), else the
    body itself."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if body.get("message"):
            return str(body["message"])
    return str(body)

"""What a diagnosis bundle holds: its members (text, where it came from, or why it is
missing) and MANIFEST.json, which lists every one of them. Pure.

A missing piece is recorded, never fatal: a member with `error` (it could not be collected)
or `skipped` (it does not apply to this run) has no text and stays out of the archive, but
stays in the manifest."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

MANIFEST = "MANIFEST.json"
FORMAT = 1


@dataclass(frozen=True)
class Member:
    name: str  # its path in the bundle, below the bundle's folder
    source: str  # where it came from: "node0: tail -n 5000 <log>", "GET <url>"
    text: str | None = None
    error: str | None = None  # why it could not be collected
    skipped: str | None = None  # why it does not apply
    redactions: int = 0  # secrets replaced in it
    dropped: str | None = None  # why it was left out although collected (a secret file)
    seconds: float | None = None  # how long collecting it took

    @property
    def present(self) -> bool:
        return self.text is not None and self.dropped is None

    def failed(self, error: str) -> Member:
        return replace(self, text=None, error=error)


def safe_name(name: str) -> str:
    """A node or service name as one path component of the bundle."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".")
    return cleaned or "_"


def manifest(
    members: list[Member],
    *,
    recipe: str,
    created_at: str,
    reason: str | None,
    deskside_version: str,
    folder: str,
) -> dict[str, Any]:
    """MANIFEST.json: the run, why the bundle was made, every member and every error."""
    return {
        "format": FORMAT,
        "recipe": recipe,
        "created_at": created_at,
        "reason": reason,
        "deskside_version": deskside_version,
        "folder": folder,
        "members": [
            {
                "name": m.name,
                "source": m.source,
                "bytes": len(m.text.encode()) if m.present and m.text is not None else 0,
                "redactions": m.redactions,
                **({"seconds": round(m.seconds, 3)} if m.seconds is not None else {}),
                **({"error": m.error} if m.error else {}),
                **({"skipped": m.skipped} if m.skipped else {}),
                **({"dropped": m.dropped} if m.dropped else {}),
            }
            for m in members
        ],
        "errors": errors(members),
    }


def errors(members: list[Member]) -> list[str]:
    """`name: error` of every member that could not be collected."""
    return [f"{m.name}: {m.error}" for m in members if m.error]


def manifest_text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"

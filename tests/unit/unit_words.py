"""Reading rendered files the way their consumers do, for tests that must not ask the code
under test what it meant: a systemd unit's ExecStart= words (systemd.service(5), "Command
lines": words split on blanks unless quoted, C escapes inside quotes, `%%` a literal
percent, `$$` a literal dollar)."""

from __future__ import annotations

import shlex


def unit_lines(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}=")]


def exec_start(text: str) -> list[str]:
    """The argv of the unit's one ExecStart= line."""
    (line,) = unit_lines(text, "ExecStart")
    # POSIX shell words read double-quoted `\\` and `\"` as systemd does; the quoter
    # never writes another escape or a single-quoted word
    words = shlex.split(line.replace("%%", "%"), posix=True)
    return [w.replace("$$", "$") for w in words]

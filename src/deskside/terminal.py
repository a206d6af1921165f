"""Text deskside did not write itself (recipe and node names, paths, error messages, log
lines), made safe for a terminal: `literal` writes control characters out (an ESC prints as
the four characters `\\x1b`, never as a terminal escape); `shown` also escapes Rich markup, so
`[bold]x[/]` prints as those characters."""

from __future__ import annotations

import re

from rich.markup import escape

# C0 controls but tab and newline, DEL, C1 controls, and the Unicode line/paragraph
# separators and bidirectional overrides that reorder what a terminal shows.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def literal(text: object, *, multiline: bool = True) -> str:
    """`text` with its control characters written out (`\\x1b`, `\\u202e`); newlines and
    tabs kept when `multiline`, else written out too. For text printed with markup off."""
    s = str(text)
    if not multiline:
        s = s.replace("\n", "\\n").replace("\t", "\\t")

    def written(m: re.Match[str]) -> str:
        c = ord(m.group())
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    return _CONTROL.sub(written, s)


def shown(text: object, *, multiline: bool = True) -> str:
    """`text` (anything not deskside's own) made safe to print with Rich markup on: its
    markup escaped and its control characters written out (see `literal`)."""
    return escape(literal(text, multiline=multiline))


def snippet(text: object, limit: int = 200) -> str:
    """What a server or file said, quoted in a message: one line, its control characters
    written out, at most `limit` characters (a binary or huge answer stays short)."""
    s = literal(" ".join(str(text).split()), multiline=False)
    return s if len(s) <= limit else s[: limit - 3] + "..."

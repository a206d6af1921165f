"""Quoting for every file format the bundle contains, so recipe values stay data.

Each format has its own rules, and a value that is safe in one is live in another:

- POSIX sh (launch.sh): single quotes, `'"'"'` for an embedded quote (as `shlex.quote`,
  which however leaves `=` unquoted: `X==a` is then misread by shellcheck).
  Nothing inside single quotes is special, newlines included.
- systemd unit files (ExecStart= and friends): `%` starts a specifier (`%%` is a literal
  percent), `$` starts an environment substitution (`$$` is a literal dollar), and words
  are split on blanks unless double-quoted, with C escapes (`\\\\`, `\\"`) inside quotes.
- Compose files: every string is interpolated (`${VAR}`, `$VAR`), `$$` is a literal
  dollar.
- Compose env files (node.env): unquoted values are interpolated and cut at ` #`;
  single-quoted values are taken literally but cannot contain a single quote (a backslash
  before the closing quote escapes it). Values outside that set are not written to
  node.env at all: launch.sh, which is sh, sets them exactly.
"""

from __future__ import annotations

import re

_SH_PLAIN = re.compile(r"[A-Za-z0-9_./:,+@%^-]+")
_ENV_PLAIN = re.compile(r"[A-Za-z0-9_./:,+@%^-]*")
_ENV_SINGLE_QUOTABLE = re.compile(r"[^'\\\r\n\x00]*")
_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_./:,=+@-]+")


def sh(value: str) -> str:
    """One word for POSIX sh, quoted only when it has to be."""
    if _SH_PLAIN.fullmatch(value):
        return value
    return sh_always(value)


def sh_always(value: str) -> str:
    """One word for POSIX sh, always single-quoted (for values that must read as data)."""
    return "'" + value.replace("'", "'\"'\"'") + "'"


def env_file_value(value: str) -> str | None:
    """`value` as a Compose env-file value that sh reads identically, or None when no
    such spelling exists (a single quote, backslash, line break or NUL in it)."""
    if _ENV_PLAIN.fullmatch(value):
        return value
    if _ENV_SINGLE_QUOTABLE.fullmatch(value):
        return "'" + value + "'"
    return None


def systemd_word(value: str) -> str:
    """One argument of a systemd command line (ExecStart=, ExecStop=)."""
    escaped = value.replace("%", "%%").replace("$", "$$")
    if _SYSTEMD_PLAIN.fullmatch(value):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_command(argv: list[str]) -> str:
    return " ".join(systemd_word(a) for a in argv)


def compose_string(value: str) -> str:
    """A string Compose will not interpolate."""
    return value.replace("$", "$$")

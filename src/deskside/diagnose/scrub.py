"""Secrets never enter a diagnosis bundle. Pure: text in, text out.

- Files that hold secrets by their nature (environment files, key files, anything under a
  `secrets/` folder) are dropped whole: `dropped`.
- Every text member is scrubbed (`Scrubber.scrub`; JSON value by value, `scrub_json`, so it
  stays JSON): the run's known secrets (the engine's
  API key, the proxy master key, Hugging Face tokens found on this machine and the nodes)
  wherever they appear, and values that look like credentials whatever their source:
  `Authorization: Bearer x`, `NAME=x` and `"NAME": "x"` where NAME names a key, token,
  secret or password, `--api-key x` style flags, Hugging Face tokens (`hf_...`), OpenAI
  style keys (`sk-...`) and PEM private keys. Each value becomes `[REDACTED]`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

REDACTED = "[REDACTED]"
MIN_KNOWN = 6  # shorter known values would redact ordinary words; patterns still apply

# Names of credentials: *_API_KEY, *_KEY, *TOKEN, *SECRET*, *PASSWORD, *PASSWD (any case).
_NAME = r"[A-Za-z0-9_.-]*(?:api[_-]?key|[_-]key|token|secret[A-Za-z0-9_.-]*|password|passwd)"
_SECRET_KEY = re.compile("(?i)" + _NAME)
_VALUE = r"[^\s\"',;&\\]+"
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # PEM private keys, whole
    (
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
            re.DOTALL,
        ),
        REDACTED,
    ),
    # Authorization: Bearer x / Basic x
    (re.compile(r"(?i)\b(bearer|basic)(\s+)" + _VALUE), r"\1\2" + REDACTED),
    # "NAME": "value" (JSON) and NAME: value (YAML)
    (
        re.compile(r"(?i)(\"" + _NAME + r"\"\s*:\s*\")(?:[^\"\\]|\\.)*(\")"),
        r"\1" + REDACTED + r"\2",
    ),
    (
        re.compile(
            r"(?im)^(\s*-?\s*" + _NAME + r"\s*:[ \t]+)(?:\"[^\"\n]*\"|'[^'\n]*'|" + _VALUE + ")"
        ),
        r"\1" + REDACTED,
    ),
    # NAME=value (environment, shell, logs)
    (re.compile(r"(?i)(?<![A-Za-z0-9_.-])(" + _NAME + r")=" + _VALUE), r"\1=" + REDACTED),
    # --api-key x, --api-key=x, --hf-token x (whole words of the flag, like the recipe rules)
    (
        re.compile(
            r"(?i)(?<![A-Za-z0-9_-])(--?[A-Za-z0-9_-]*(?:token|key|apikey|secret|password"
            r"|passwd))(?![A-Za-z0-9_-])(=|[ \t]+)(?!-)" + _VALUE
        ),
        r"\1\2" + REDACTED,
    ),
    # values shaped like credentials
    (re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{20,}"), REDACTED),
    (re.compile(r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{16,}"), REDACTED),
)


@dataclass
class Scrubber:
    """Scrubs text of `known` secrets and of credential-shaped values (see the module
    docstring)."""

    known: set[str] = field(default_factory=set)

    def add(self, values: Iterable[str]) -> None:
        for value in values:
            value = value.strip()
            if len(value) >= MIN_KNOWN:
                self.known.add(value)

    def scrub_json(self, text: str) -> tuple[str, int] | None:
        """A JSON document scrubbed value by value (so it stays JSON): every string as
        text, and the string value of every key that names a credential whole; None when
        `text` is not JSON."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        count = 0

        def walk(value: Any) -> Any:
            nonlocal count
            if isinstance(value, str):
                scrubbed, n = self.scrub(value)
                count += n
                return scrubbed
            if isinstance(value, list):
                return [walk(v) for v in value]
            if isinstance(value, dict):
                out = {}
                for key, v in value.items():
                    if isinstance(v, str) and v and _SECRET_KEY.fullmatch(str(key)):
                        out[walk(key)] = REDACTED
                        count += 1
                    else:
                        out[walk(key)] = walk(v)
                return out
            return value

        return json.dumps(walk(data), indent=2) + "\n", count

    def scrub(self, text: str) -> tuple[str, int]:
        """`text` with every secret replaced, and how many replacements were made."""
        count = 0
        # longest first: a secret that contains another is replaced whole
        for value in sorted(self.known, key=len, reverse=True):
            n = text.count(value)
            if n:
                text = text.replace(value, REDACTED)
                count += n
        for pattern, replacement in _PATTERNS:
            text, n = pattern.subn(replacement, text)
            count += n
        return text, count


_ENV_FILE = re.compile(r"(?i)(^|[._-])env$|^\.env([._-].*)?$|^env\.")
_KEY_FILE = re.compile(
    r"(?i)\.(key|pem|p12|pfx|jks|keystore)$|^id_(rsa|dsa|ecdsa|ed25519)(\.pub)?$|"
    r"(^|[._-])(token|master-key|credentials|secret)s?$|^\.?netrc$|^\.?htpasswd$"
)


def dropped(name: str) -> str | None:
    """Why the member `name` (a path in the bundle) may not enter it, or None."""
    path = PurePosixPath(name)
    if "secrets" in path.parts[:-1]:
        return "a file of a secrets folder"
    if _ENV_FILE.search(path.name):
        return "an environment file"
    if _KEY_FILE.search(path.name):
        return "a key or token file"
    return None


def secret_values(text: str) -> list[str]:
    """The values of a secret file as deskside writes them: `NAME=value` lines give their
    value, other non-empty lines are a value themselves."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name.strip()):
            out.append(value.strip().strip("'\""))
        else:
            out.append(line)
    return [v for v in out if v]

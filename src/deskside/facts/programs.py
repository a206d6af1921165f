"""The programs a node has: which of the names asked about are on its PATH, and the
versions of Docker's daemon and of a Compose program ("docker compose" or
"docker-compose")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deskside.facts.base import Fact

PROGRAMS_SH = r"""
for p in "$@"; do
  if command -v "$p" >/dev/null 2>&1; then printf '%s\n' "$p"; fi
done
"""

# the Compose program is one or two words ("docker compose", "docker-compose")
DOCKER_SH = r"""
echo "docker=$(docker version --format '{{.Server.Version}}' 2>/dev/null)"
# shellcheck disable=SC2086
echo "compose=$($1 version --short 2>/dev/null)"
"""


def programs(names: Sequence[str]) -> Fact[frozenset[str]]:
    """Of `names`, those found on the node's PATH (a name may also be a path)."""

    def parse(text: str) -> frozenset[str]:
        return frozenset(line for line in text.splitlines() if line in names)

    return Fact("programs", PROGRAMS_SH, parse, args=tuple(names))


@dataclass(frozen=True)
class Docker:
    """None: not installed, or (the daemon) not answering."""

    daemon: str | None
    compose: str | None


def _version(text: str) -> str | None:
    text = text.strip()
    return text if text and text.isprintable() and len(text) <= 128 else None


def parse_docker(text: str) -> Docker:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        values.setdefault(key, value)
    return Docker(_version(values.get("docker", "")), _version(values.get("compose", "")))


def docker(compose: str) -> Fact[Docker]:
    """Docker's daemon and the `compose` program (its words split by the shell)."""
    return Fact("docker", DOCKER_SH, parse_docker, args=(compose,), cap=4096)

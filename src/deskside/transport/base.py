"""The Transport protocol: run a command, start a detached process, put or get a file.

Local processes, processes in a network namespace on this machine, and (later) SSH hosts
all implement it; a fake records what would be done. Operations build argv lists; only a
transport executes them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from deskside.errors import DesksideError


class SshError(DesksideError):
    """A host that cannot be reached, authenticated or verified over SSH (raised by
    `deskside.transport.ssh`; here so that catching it does not load asyncssh)."""


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


class Transport(Protocol):
    """Where a node's commands run."""

    @property
    def name(self) -> str:
        """A short label for messages (host, namespace...)."""
        ...

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        input: str | None = None,
    ) -> Result:
        """Run to completion; never raises for a non-zero exit (rc 124 on timeout, 127
        when the program is missing)."""
        ...

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        log_path: str,
        cwd: str | None = None,
    ) -> int:
        """Start a detached long-running process in its own session (its pid is also its
        process group id), stdout and stderr appended to `log_path`; return the pid."""
        ...

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        """Write `data` to `path` atomically (temporary file, then rename)."""
        ...

    def put_file(self, local: Path, path: str, mode: int = 0o644) -> None:
        """Copy the local file `local` to `path` (streamed, atomically like `put`)."""
        ...

    def get(self, path: str) -> bytes:
        """Read a file; FileNotFoundError when absent."""
        ...

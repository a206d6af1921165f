"""Run on this machine, optionally inside a network namespace (`ip netns exec NAME`).

Files are written through `deskside.safefs` (exclusive temporary files renamed into place,
never through a link; logs opened for appending never through a link either)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from deskside.safefs import copy_file, open_append, write_file
from deskside.smallfile import read_small_file
from deskside.transport.base import Result

GET_LIMIT = 64 << 20  # bytes `get` reads at most: state, locks, manifests, /proc files


class LocalTransport:
    """This machine's processes; with `netns`, every command runs in that namespace."""

    def __init__(self, netns: str | None = None, base_env: Mapping[str, str] | None = None):
        self.netns = netns
        self.base_env = dict(os.environ if base_env is None else base_env)

    @property
    def name(self) -> str:
        return f"netns:{self.netns}" if self.netns else "local"

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The argv that runs `argv` where this transport runs things."""
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        return [*prefix, *argv]

    def _env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        return {**self.base_env, **(env or {})}

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        input: str | None = None,
    ) -> Result:
        try:
            done = subprocess.run(
                self.wrap(argv),
                env=self._env(env),
                capture_output=True,
                text=True,
                timeout=timeout,
                input=input,
                check=False,
            )
        except FileNotFoundError as exc:
            return Result(127, "", str(exc))
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
            return Result(124, out, f"timed out after {timeout} s")
        return Result(done.returncode, done.stdout, done.stderr)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        log_path: str,
        cwd: str | None = None,
    ) -> int:
        log = open_append(Path(log_path), 0o644)
        try:
            proc = subprocess.Popen(
                self.wrap(argv),
                env=self._env(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
            )
        finally:
            os.close(log)
        return proc.pid

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        """Write `data` to `path` (`deskside.safefs.write_file`: an exclusive temporary
        file renamed over the target; no link followed below $DESKSIDE_HOME or the nearest
        existing folder; folders made 0700 under $DESKSIDE_HOME)."""
        write_file(Path(path), data, mode)

    def put_file(self, local: Path, path: str, mode: int = 0o644) -> None:
        """Copy the contents of the regular file `local` (never a link) to `path`, like
        `put`."""
        copy_file(local, Path(path), mode)

    def get(self, path: str, limit: int = GET_LIMIT) -> bytes:
        """A regular file of at most `limit` bytes (see `deskside.smallfile`): a FIFO or a
        device is refused without blocking (an OSError), and so is a larger file."""
        return read_small_file(path, limit)

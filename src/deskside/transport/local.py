"""Run on this machine, optionally inside a network namespace (`ip netns exec NAME`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

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
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                self.wrap(argv),
                env=self._env(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
            )
        return proc.pid

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def put_file(self, local: Path, path: str, mode: int = 0o644) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "wb") as out, open(local, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, path: str, limit: int = GET_LIMIT) -> bytes:
        """A regular file of at most `limit` bytes (see `deskside.smallfile`): a FIFO or a
        device is refused without blocking (an OSError), and so is a larger file."""
        return read_small_file(path, limit)

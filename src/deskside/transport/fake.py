"""A transport that records what would run and answers from a script (unit tests)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from deskside.transport.base import Result


@dataclass
class FakeTransport:
    label: str = "fake"
    answers: dict[tuple[str, ...], Result] = field(default_factory=dict)
    default: Callable[[Sequence[str]], Result] = lambda argv: Result(0, "", "")
    files: dict[str, bytes] = field(default_factory=dict)
    calls: list[tuple[str, tuple[str, ...], dict[str, str]]] = field(default_factory=list)
    next_pid: int = 4242

    @property
    def name(self) -> str:
        return self.label

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        input: str | None = None,
    ) -> Result:
        self.calls.append(("run", tuple(argv), dict(env or {})))
        return self.answers.get(tuple(argv)) or self.default(argv)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        log_path: str,
        cwd: str | None = None,
    ) -> int:
        self.calls.append(("spawn", tuple(argv), dict(env or {})))
        self.next_pid += 1
        return self.next_pid

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        self.calls.append(("put", (path,), {}))
        self.files[path] = data

    def put_file(self, local: Path, path: str, mode: int = 0o644) -> None:
        self.put(local.read_bytes(), path, mode)

    def get(self, path: str) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

"""The node's running engine, found under `<proc-root>`: the process whose environment
carries deskside's run tag (`deskside.facts.procs.RUN_TAG=<recipe>/<node>/<14 digits>/engine`),
and the environment it was started with (NCCL_IB_GID_INDEX among it).

The exporter reads these /proc files itself, every read bounded (`read_small_file`), through
the process table's own parsers (`deskside.facts.procs.parse_stat`, `parse_environ`): a
scrape stays in-process. A process that vanished, belongs to another user (environ
unreadable), is a zombie or carries no tag is skipped without a word. The engine's own
workers inherit its environment, so several processes may match: the newest start (the
tag's time stamp) wins. The last match is remembered by pid and start time, so a scrape does
not re-read every process while the engine lives."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from deskside.facts.procs import RUN_TAG, parse_environ, parse_stat
from deskside.smallfile import read_small_file

ENVIRON_LIMIT = 4 << 20  # an environment block; ARG_MAX-sized ones exist
STAT_LIMIT = 64 << 10
MAX_PROCESSES = 100_000  # pid_max on a large host is 4M; a node runs a few thousand


@dataclass(frozen=True)
class EngineProcess:
    pid: int
    start_ticks: int
    tag: str
    env: dict[str, str]


def tag_pattern(recipe_name: str, node: str) -> re.Pattern[str]:
    """What `deskside.runtime.control.run_tag` writes for this node's engine."""
    return re.compile(rf"{re.escape(recipe_name)}/{re.escape(node)}/([0-9]{{14}})/engine")


def _stat(proc_root: Path, pid: int) -> tuple[str, int] | None:
    """(state, start time) of `pid`; None when it cannot be read."""
    try:
        text = read_small_file(proc_root / str(pid) / "stat", STAT_LIMIT).decode()
    except (OSError, UnicodeDecodeError):
        return None
    stat = parse_stat(text)
    return (stat.state, stat.start_ticks) if stat is not None else None


def _candidate(proc_root: Path, pid: int, pattern: re.Pattern[str]) -> EngineProcess | None:
    stat = _stat(proc_root, pid)
    if stat is None or stat[0] in ("Z", "X"):
        return None
    try:
        env = parse_environ(read_small_file(proc_root / str(pid) / "environ", ENVIRON_LIMIT))
    except OSError:
        return None
    tag = env.get(RUN_TAG)
    if tag is None or not pattern.fullmatch(tag):
        return None
    return EngineProcess(pid=pid, start_ticks=stat[1], tag=tag, env=env)


def _pids(proc_root: Path) -> list[int]:
    pids: list[int] = []
    try:
        with os.scandir(proc_root) as entries:
            for entry in entries:
                if entry.name.isdigit():
                    pids.append(int(entry.name))
                    if len(pids) >= MAX_PROCESSES:
                        break
    except OSError:
        return []
    return sorted(pids)


def find_engine(proc_root: Path, recipe_name: str, node: str) -> EngineProcess | None:
    """The node's running engine process (the newest tag; the lowest pid of that start)."""
    pattern = tag_pattern(recipe_name, node)
    best: EngineProcess | None = None
    for pid in _pids(proc_root):
        found = _candidate(proc_root, pid, pattern)
        if found is not None and (best is None or found.tag > best.tag):
            best = found
    return best


class EngineFinder:
    """`find_engine`, remembering the last match while its pid keeps its start time."""

    def __init__(self, proc_root: Path, recipe_name: str, node: str) -> None:
        self.proc_root = proc_root
        self.recipe_name = recipe_name
        self.node = node
        self._last: EngineProcess | None = None

    def __call__(self) -> EngineProcess | None:
        last = self._last
        if last is not None:
            stat = _stat(self.proc_root, last.pid)
            if stat is not None and stat[0] not in ("Z", "X") and stat[1] == last.start_ticks:
                return last
        self._last = find_engine(self.proc_root, self.recipe_name, self.node)
        return self._last

"""Process facts from /proc for tests: who belongs to a session, memory, liveness, and a
stop of a session the test itself started (deskside reaches processes only through its
Transports; tests check what happened from outside, with these)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    state: str  # R, S, D, Z, T...
    ppid: int
    pgid: int
    sid: int
    rss_bytes: int
    cmdline: str


def parse_stat(text: str) -> tuple[str, int, int, int]:
    """(state, ppid, pgid, sid) from /proc/PID/stat (the command may hold spaces and
    parentheses, so split after the last ')')."""
    rest = text[text.rindex(")") + 2 :].split()
    return rest[0], int(rest[1]), int(rest[2]), int(rest[3])


def parse_rss(status_text: str) -> int:
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def read_proc(pid: int, root: Path = PROC) -> ProcInfo | None:
    base = root / str(pid)
    try:
        state, ppid, pgid, sid = parse_stat((base / "stat").read_text())
        rss = parse_rss((base / "status").read_text())
        cmd = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError, PermissionError):
        return None
    return ProcInfo(pid, state, ppid, pgid, sid, rss, cmd.strip())


def all_procs(root: Path = PROC) -> list[ProcInfo]:
    out = []
    for entry in root.iterdir():
        if entry.name.isdigit() and (info := read_proc(int(entry.name), root)) is not None:
            out.append(info)
    return out


def session_members(sid: int, procs: Iterable[ProcInfo] | None = None) -> list[ProcInfo]:
    """Live (non-zombie) processes of session `sid` (a spawned node and everything it
    started, unless they left the session)."""
    return [p for p in (procs or all_procs()) if p.sid == sid and p.state != "Z"]


def reap(pid: int) -> None:
    """Collect `pid` if it is our exited child (no zombie left behind)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def alive(pid: int) -> bool:
    reap(pid)
    info = read_proc(pid)
    return info is not None and info.state != "Z"


def _signal_all(members: Iterable[ProcInfo], sig: int) -> None:
    for p in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p.pid, sig)


def stop_session(sid: int, grace: float = 20.0) -> bool:
    """SIGTERM every process of the session, wait up to `grace` seconds, SIGKILL what is
    left. True when nothing of the session remains."""
    members = session_members(sid)
    if not members:
        reap(sid)
        return True
    _signal_all(members, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        reap(sid)
        if not session_members(sid):
            return True
        time.sleep(0.2)
    _signal_all(session_members(sid), signal.SIGKILL)
    for _ in range(50):
        reap(sid)
        if not session_members(sid):
            return True
        time.sleep(0.1)
    return not session_members(sid)


def shm_in_use(root: Path = PROC) -> set[str]:
    """Names under /dev/shm that a live process has open or mapped (/proc/*/fd, maps)."""
    names: set[str] = set()
    for entry in root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("/dev/shm/"):
                    names.add(target[len("/dev/shm/") :].split(" ", 1)[0])
            for line in (entry / "maps").read_text().splitlines():
                if "/dev/shm/" in line:
                    names.add(line.split("/dev/shm/", 1)[1].split(" ", 1)[0])
        except (FileNotFoundError, PermissionError, ProcessLookupError, NotADirectoryError):
            continue
    return names

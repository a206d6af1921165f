"""Every thread of every process of a node: its state letter, CPU time, kernel wait channel
and name (for a diagnosis). Printed raw and framed like the process table
(`deskside.facts.procs`), parsed here with the table's own stat parser."""

from __future__ import annotations

from dataclasses import dataclass, field

from deskside.facts.base import Fact
from deskside.facts.procs import LINE_BYTES, PRINTABLE, TABLE_CAP, parse_stat

# `proc_threads`: every thread of every process (its stat line and kernel wait channel)
THREADS_SH = r"""
proc_threads() {
  ( export LC_ALL=C; cd /proc || exit 1
    {
      printf '%s\n' [0-9]*/task/[0-9]*/stat | xargs -r grep -a -H -m 16 ''
      printf '%s\n' [0-9]*/wchan [0-9]*/task/[0-9]*/wchan | xargs -r grep -a -H -m 1 ''
    } 2>/dev/null | cut -b 1-LINE_BYTES
  ) | LC_ALL=C tr -c PRINTABLE '?'
}
""".replace("LINE_BYTES", str(LINE_BYTES)).replace("PRINTABLE", PRINTABLE)


@dataclass(frozen=True)
class Thread:
    tid: int
    state: str
    cpu_ticks: int
    wchan: str  # the kernel function it waits in ("" when running)
    comm: str


@dataclass(frozen=True)
class Threads:
    tasks: dict[int, tuple[Thread, ...]] = field(default_factory=dict)  # pid -> its threads
    wchan: dict[int, str] = field(default_factory=dict)  # pid -> its wait channel


def _wchan(text: str) -> str:
    return "" if text.strip() in ("", "0") else text.strip()


def parse_threads(text: str) -> Threads:
    """What `proc_threads` printed (lines of other paths are ignored)."""
    stats: dict[tuple[int, int], list[str]] = {}
    waits: dict[tuple[int, int], str] = {}
    for line in text.split("\n"):
        path, colon, content = line.partition(":")
        parts = path.split("/")
        if not colon or not parts[0].isdigit():
            continue
        pid = int(parts[0])
        if parts[1:] == ["wchan"]:
            waits[(pid, 0)] = _wchan(content)
        elif len(parts) == 4 and parts[1] == "task" and parts[2].isdigit():
            key = (pid, int(parts[2]))
            if parts[3] == "stat":
                stats.setdefault(key, []).append(content)
            elif parts[3] == "wchan":
                waits[key] = _wchan(content)
    tasks: dict[int, list[Thread]] = {}
    for (pid, tid), lines in sorted(stats.items()):
        st = parse_stat("\n".join(lines))
        if st is not None and st.pid == tid:
            thread = Thread(tid, st.state, st.cpu_ticks, waits.get((pid, tid), ""), st.comm)
            tasks.setdefault(pid, []).append(thread)
    return Threads(
        {pid: tuple(ts) for pid, ts in tasks.items()},
        {pid: w for (pid, tid), w in waits.items() if tid == 0},
    )


THREADS: Fact[Threads] = Fact("threads", THREADS_SH + "proc_threads", parse_threads, cap=TABLE_CAP)

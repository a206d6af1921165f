"""One look at a node's engine processes, taken on the node in one round trip: the node's
process table (`deskside.facts.procs`: state letters, CPU time, titles), its clock, and
when the engine's log last grew.

Which processes: for the process control, the live members of the engine's session, tagged
or not (a rank whose title hid its tag still counts), unless the leader is another process
now (`deskside.identity`); reading is safe: no process can join another's session from
outside. For systemd, the processes in the cgroup of the unit's main process.
"""

from __future__ import annotations

from deskside.facts.base import FactError
from deskside.facts.procs import TABLE_SH, Process, ProcessTable, computes, split_table
from deskside.identity import Claim, judge
from deskside.survive.observe import ProcessSample

NAME_CHARS = 80  # of a process's title kept in a sample

_CLOCK_SH = r"""
echo "now $(date +%s)"
if [ -n "$log" ] && [ -f "$log" ]; then echo "log $(stat -c %Y -- "$log")"; fi
"""

SESSION_SAMPLE_SH = (
    "log=${4:-}\n"
    + TABLE_SH
    + "proc_table full\n"
    + _CLOCK_SH
    + r"""printf 'session\n%s\n%s\n%s' "$1" "${2:-}" "${3:-}"
"""
)

CGROUP_SAMPLE_SH = (
    "log=${2:-}\n"
    + TABLE_SH
    + "proc_table full\n"
    + _CLOCK_SH
    + r"""printf 'cgroup\n%s' "$1"
"""
)


def session_sample(pid: int, start: int | None, tag: str | None, log: str | None) -> list[str]:
    identity = ["" if start is None else str(start), tag or ""]
    return ["sh", "-c", SESSION_SAMPLE_SH, "sh", str(pid), *identity, log or ""]


def cgroup_sample(main_pid: int, log: str | None = None) -> list[str]:
    return ["sh", "-c", CGROUP_SAMPLE_SH, "sh", str(main_pid), log or ""]


def _session(table: ProcessTable, words: list[str]) -> list[Process]:
    if len(words) < 3 or not words[0].isdigit():
        return []
    start = int(words[1]) if words[1].isdigit() else None
    claim = Claim("the engine", int(words[0]), start, words[2] or None)
    if judge(table, claim).state == "replaced":
        return []
    return table.session(int(words[0]))


def _cgroup(table: ProcessTable, main: str) -> list[Process]:
    """Every live process whose cgroup (v2 `0::`, else v1 `name=systemd`) is the main
    process's or below it."""
    leader = table.get(int(main)) if main.isdigit() and int(main) > 1 else None
    if leader is None:
        return []
    lines = leader.cgroups
    want = next((c for c in lines if c.startswith("0::")), None)
    want = want or next((c for c in lines if ":name=systemd:" in c), None)
    if want is None:
        return []
    return [
        p
        for p in table.processes.values()
        if not p.gone and any(c == want or c.startswith(want + "/") for c in p.cgroups)
    ]


def parse_sample(
    stdout: str, node: str, role: str, at: float
) -> tuple[list[ProcessSample], float | None]:
    """The node's processes (stamped `at`, the observer's clock) and how long its log has
    been silent (by the node's own clock; None without a log)."""
    try:
        table, rest = split_table(stdout)
    except FactError:
        return [], None
    values: dict[str, str] = {}
    lines = rest.split("\n")
    while lines and lines[0].split(" ", 1)[0] in ("now", "log"):
        key, _, value = lines.pop(0).partition(" ")
        values[key] = value.strip()
    kind, words = (lines[0], lines[1:]) if lines else ("", [])
    if kind == "session":
        procs = _session(table, [*words[:2], "\n".join(words[2:])])
    elif kind == "cgroup" and words:
        procs = _cgroup(table, words[0])
    else:
        procs = []
    try:
        node_now = float(values["now"]) if "now" in values else None
        silent = node_now - float(values["log"]) if node_now and "log" in values else None
    except ValueError:
        silent = None
    tck = float(table.clk_tck) or 100.0
    samples = []
    for p in procs:
        name = p.command[:NAME_CHARS].strip()
        samples.append(
            ProcessSample(
                at=at,
                node=node,
                role=role,
                pid=p.pid,
                alive=True,
                state=p.state,
                cpu_seconds=p.cpu_ticks / tck,
                log_silent_seconds=max(silent, 0.0) if silent is not None else None,
                name=name or None,
                computes=computes(name),
            )
        )
    return samples, silent


__all__ = ["cgroup_sample", "parse_sample", "session_sample"]

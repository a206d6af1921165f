"""The engine's processes on a node, for a diagnosis: which pids are the engine's (per kind
of control), and for each one and each of its threads the /proc facts that tell a busy
engine from a wedged one (state letter, kernel wait channel, CPU time, resident memory).

Commands are POSIX sh run through the node's Transport; they print the node's process table
(`deskside.facts.procs`) and its threads; parsers and the text view are pure.

Which processes are the engine's:

- process control: the members of the session deskside started, judged by
  `deskside.identity` (the leader's start time, the run tag of every member); a leader that
  is another process now is reported, never read further;
- systemd (native runtime): every process of the unit's cgroup;
- Compose (container runtime, under systemd or not): the main process of every running
  container of the engine's project;

then every descendant of those (a worker that left the session, a zombie not yet reaped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from deskside.facts.base import FactError
from deskside.facts.procs import TABLE_SH, split_table
from deskside.facts.threads import THREADS_SH, parse_threads
from deskside.identity import Claim, judge
from deskside.units import format_bytes

COMMAND_BYTES = 1000  # of a command line shown

# The process table, then the claim it is judged against (the arguments, as given).
SESSION_PIDS_SH = (
    TABLE_SH
    + r"""
proc_table
printf 'claim\n%s\n%s\n%s' "$1" "${2:-}" "${3:-}"
"""
)


def session_pids_command(pid: int, start: int | None, tag: str | None) -> list[str]:
    identity = ["" if start is None else str(start), tag or ""]
    return ["sh", "-c", SESSION_PIDS_SH, "sh", str(pid), *identity]


def parse_session_pids(stdout: str) -> tuple[str, list[int]]:
    """(gone | replaced | zombie | session, pids) from `session_pids_command` output: the
    session's processes of the claim (`deskside.identity.Verdict.members`)."""
    try:
        table, rest = split_table(stdout)
    except FactError:
        return "gone", []
    words = rest.split("\n", 3)
    if len(words) < 4 or words[0] != "claim" or not words[1].isdigit():
        return "gone", []
    start = int(words[2]) if words[2].isdigit() else None
    verdict = judge(table, Claim("the engine", int(words[1]), start, words[3] or None))
    if verdict.state == "zombie":
        return "zombie", [int(words[1])]
    if verdict.state in ("gone", "replaced"):
        return verdict.state, []
    return "session", list(verdict.members)


# Every process of a systemd unit's cgroup (v2, or the v1 name=systemd hierarchy).
UNIT_PIDS_SH = r"""
cg=$(systemctl show --property ControlGroup --value -- "$1" 2>/dev/null)
[ -n "$cg" ] || { echo "the unit has no control group (not running)" >&2; exit 0; }
for base in /sys/fs/cgroup /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do
  if [ -f "$base$cg/cgroup.procs" ]; then
    find "$base$cg" -name cgroup.procs -exec cat {} + 2>/dev/null
    exit 0
  fi
done
echo "no cgroup folder for $cg" >&2
"""


def unit_pids_command(unit: str) -> list[str]:
    return ["sh", "-c", UNIT_PIDS_SH, "sh", unit]


def container_pids_command(sudo: Sequence[str], ids: Sequence[str]) -> list[str]:
    """The main process (on the host) of every container in `ids`."""
    return [*sudo, "docker", "inspect", "--format", "{{.State.Pid}}", "--", *ids]


def parse_pids(stdout: str) -> list[int]:
    return sorted({int(w) for w in stdout.split() if w.isdigit() and int(w) > 1})


# The roots ("$@"), then the process table and every thread of the node: the roots'
# descendants are found in Python.
TREE_SH = (
    TABLE_SH
    + THREADS_SH
    + r"""
echo "roots $*"
proc_table full
proc_threads
"""
)


def tree_command(roots: Sequence[int]) -> list[str]:
    return ["sh", "-c", TREE_SH, "sh", *(str(p) for p in roots)]


@dataclass(frozen=True)
class Task:
    """One thread of a process."""

    tid: int
    state: str  # /proc/PID/task/TID/stat state letter (proc(5)): R S D T t Z X I
    cpu_seconds: float
    wchan: str  # the kernel function it waits in ("" when running)
    name: str


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str
    cpu_seconds: float  # utime + stime
    rss_bytes: int
    threads: int
    start_ticks: int
    wchan: str
    name: str  # the command name (comm: a process title such as vLLM's shows)
    command: str = ""  # the command line (COMMAND_BYTES at most)
    tasks: tuple[Task, ...] = ()


@dataclass(frozen=True)
class ProcTree:
    procs: tuple[Proc, ...]
    clk_tck: int = 100
    uid: int | None = None
    problems: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


def _one_line(text: str) -> str:
    return text.replace("\t", " ").replace("\n", " ")


def parse_tree(stdout: str) -> ProcTree:
    """The roots of `tree_command` and their descendants (sorted by pid), with their
    threads; a listing that cannot be read is an empty tree with the reason in
    `problems`."""
    first, _, rest = stdout.partition("\n")
    if not first.startswith("roots"):
        return ProcTree((), problems=("no process listing",) if stdout.strip() else ())
    roots = [int(w) for w in first.split()[1:] if w.isdigit()]
    try:
        table, rest = split_table(rest)
    except FactError as exc:
        return ProcTree((), problems=(f"the process listing could not be read: {exc}",))
    threads = parse_threads(rest)
    clk = table.clk_tck
    procs = []
    for pid in table.descendants(roots):
        p = table.processes[pid]
        procs.append(
            Proc(
                pid=pid,
                ppid=p.ppid,
                state=p.state,
                cpu_seconds=p.cpu_ticks / clk,
                rss_bytes=p.rss_bytes,
                threads=p.threads,
                start_ticks=p.start_ticks,
                wchan=threads.wchan.get(pid, ""),
                name=p.comm,
                command=_one_line(" ".join(p.argv))[:COMMAND_BYTES].strip(),
                tasks=tuple(
                    Task(t.tid, t.state, t.cpu_ticks / clk, t.wchan, t.comm)
                    for t in threads.tasks.get(pid, ())
                ),
            )
        )
    problems = (f"{table.junk} line(s) of the process listing did not parse",) if table.junk else ()
    return ProcTree(tuple(procs), clk, table.uid, problems)


def _order(tree: ProcTree) -> list[tuple[int, Proc]]:
    """Processes depth first from the roots (those whose parent is not listed)."""
    by_pid = {p.pid: p for p in tree.procs}
    children: dict[int, list[Proc]] = {}
    for p in tree.procs:
        children.setdefault(p.ppid, []).append(p)
    out: list[tuple[int, Proc]] = []
    seen: set[int] = set()

    def walk(p: Proc, depth: int) -> None:
        if p.pid in seen:
            return
        seen.add(p.pid)
        out.append((depth, p))
        for c in children.get(p.pid, []):
            walk(c, depth + 1)

    for p in tree.procs:
        if p.ppid not in by_pid:
            walk(p, 0)
    for p in tree.procs:  # a cycle (pids reused while listing): still shown
        walk(p, 0)
    return out


def thread_states(p: Proc) -> str:
    """`40 S, 2 R, 1 D`: how many threads are in each state."""
    counts: dict[str, int] = {}
    for t in p.tasks:
        counts[t.state] = counts.get(t.state, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def render_tree(tree: ProcTree, title: str) -> str:
    """The text view: the tree (indented by parent), then every thread of each process."""
    lines = [
        title,
        "state letters (proc(5)): R running, S sleeping, D uninterruptible wait, T stopped, "
        "t traced, Z zombie, I idle",
        "",
        f"{'PID':>8} {'PPID':>8} S {'CPU s':>10} {'RSS':>10} {'THR':>4}  {'WCHAN':<24} COMMAND",
    ]
    for depth, p in _order(tree):
        name = "  " * depth + p.name
        lines.append(
            f"{p.pid:>8} {p.ppid:>8} {p.state} {p.cpu_seconds:>10.2f} "
            f"{format_bytes(p.rss_bytes):>10} {p.threads:>4}  {p.wchan or '-':<24} {name}"
        )
    if not tree.procs:
        lines.append("(no process)")
    for p in tree.procs:
        lines += ["", f"pid {p.pid} ({p.name}): {p.command or '(no command line)'}"]
        lines.append(f"  threads: {thread_states(p) or 'none listed'}")
        for t in p.tasks:
            lines.append(
                f"  {t.tid:>8} {t.state} {t.cpu_seconds:>10.2f}  {t.wchan or '-':<24} {t.name}"
            )
    lines += ["", *tree.problems]
    return "\n".join(lines).rstrip() + "\n"

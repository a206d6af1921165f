"""The engine's processes on a node, for a diagnosis: which pids are the engine's (per kind
of control), and for each one and each of its threads the /proc facts that tell a busy
engine from a wedged one (state letter, kernel wait channel, CPU time, resident memory).

Commands are POSIX sh run through the node's Transport; parsers and the text view are pure.

Which processes are the engine's:

- process control: the members of the session deskside started, proven as
  `deskside.runtime.node_sh` proves them (the leader's start time, the DESKSIDE_RUN tag of
  every member); a leader that is another process now is reported, never read further;
- systemd (native runtime): every process of the unit's cgroup;
- Compose (container runtime, under systemd or not): the main process of every running
  container of the engine's project;

then every descendant of those (a worker that left the session, a zombie not yet reaped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from deskside.runtime import node_sh
from deskside.units import format_bytes

# /proc/PID/stat after "pid (comm) ": $1 state, $2 ppid, $4 session, $12 utime, $13 stime,
# $18 num_threads, $20 starttime (proc(5) fields 3, 4, 6, 14, 15, 20, 22).
# The session leader: "gone", "replaced" (another process has its pid now), "zombie", or
# "session" followed by the tagged members' pids.
SESSION_PIDS_SH = (
    "sid=$1; start=${2:-}; tag=${3:-}\n"
    + node_sh._PID_SH
    + node_sh._STAT_SH
    + node_sh._MEMBERS_SH
    + r"""
if ! stat_fields "$sid"; then echo gone; exit 0; fi
set -- $rest
if [ "$1" = Z ]; then
  if [ -z "$start" ] || [ "${20}" = "$start" ]; then echo zombie; echo "$sid"; exit 0; fi
fi
if replaced; then echo replaced; exit 0; fi
echo session
members
"""
)


def session_pids_command(pid: int, start: int | None, tag: str | None) -> list[str]:
    return ["sh", "-c", SESSION_PIDS_SH, "sh", str(pid), *node_sh._identity(start, tag)]


def parse_session_pids(stdout: str) -> tuple[str, list[int]]:
    """(gone | replaced | zombie | session, pids) from `session_pids_command` output."""
    words = stdout.split()
    if not words:
        return "gone", []
    return words[0], [int(w) for w in words[1:] if w.isdigit()]


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


# The roots ("$@") and all their descendants; for each process a `proc` line, its command
# line (NULs, tabs and newlines as spaces, 1000 bytes at most) and a `task` line per thread.
# Fields are tab-separated; the command name (which may hold spaces) comes last.
TREE_SH = r"""
echo "clk_tck	$(getconf CLK_TCK 2>/dev/null || echo 100)"
echo "uid	$(id -u)"
pids=$(for f in /proc/[0-9]*/stat; do
  read -r st < "$f" 2>/dev/null || continue
  p=${f#/proc/}; p=${p%/stat}
  rest=${st##*) }
  set -- $rest
  echo "$p $2"
done | awk -v roots="$*" '
  { parent[$1] = $2; ids[NR] = $1 }
  END {
    n = split(roots, r, " "); for (i = 1; i <= n; i++) want[r[i]] = 1
    do { more = 0
      for (i = 1; i <= NR; i++) { p = ids[i]
        if (!(p in want) && (parent[p] in want)) { want[p] = 1; more = 1 } }
    } while (more)
    for (p in want) print p
  }')
for p in $pids; do
  read -r st < "/proc/$p/stat" 2>/dev/null || continue
  comm=${st#*\(}; comm=${comm%\)*}
  rest=${st##*) }
  set -- $rest
  w=; read -r w < "/proc/$p/wchan" 2>/dev/null
  rss=0
  while read -r k v _; do
    if [ "$k" = "VmRSS:" ]; then rss=$v; fi
  done < "/proc/$p/status" 2>/dev/null
  printf 'proc\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
    "$p" "$2" "$1" "${12}" "${13}" "$rss" "${18}" "${20}" "${w:-0}" "$comm"
  cmd=$(tr '\000\t\n' '   ' < "/proc/$p/cmdline" 2>/dev/null | head -c 1000)
  printf 'cmd\t%s\t%s\n' "$p" "$cmd"
  for tf in /proc/$p/task/[0-9]*; do
    read -r st < "$tf/stat" 2>/dev/null || continue
    tcomm=${st#*\(}; tcomm=${tcomm%\)*}
    rest=${st##*) }
    set -- $rest
    w=; read -r w < "$tf/wchan" 2>/dev/null
    printf 'task\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
      "$p" "${tf##*/}" "$1" "${12}" "${13}" "${w:-0}" "$tcomm"
  done
done
"""


def tree_command(roots: Sequence[int]) -> list[str]:
    return ["sh", "-c", TREE_SH, "sh", *(str(p) for p in roots)]


@dataclass(frozen=True)
class Task:
    """One thread of a process."""

    tid: int
    state: str  # /proc/PID/task/TID/stat state letter (proc(5)): R S D T t Z X I
    cpu_seconds: float
    wchan: str  # the kernel function it waits in ("0" or "" when running)
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
    name: str  # the command name (comm: a process title such as VLLM::Worker_TP0 shows)
    command: str = ""  # the command line (1000 bytes at most)
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


def _int(text: str) -> int:
    return int(text) if text.strip().isdigit() else 0


def parse_tree(stdout: str) -> ProcTree:
    """The processes (sorted by pid) and threads of `tree_command` output; lines that do
    not parse are counted in `problems`."""
    clk, uid = 100, None
    raw: dict[int, dict[str, Any]] = {}
    commands: dict[int, str] = {}
    tasks: dict[int, list[tuple[int, str, int, str, str]]] = {}
    bad = 0
    for line in stdout.splitlines():
        kind, _, rest = line.partition("\t")
        try:
            if kind == "clk_tck":
                clk = _int(rest) or 100
            elif kind == "uid":
                uid = int(rest) if rest.strip().isdigit() else None
            elif kind == "proc":
                f = rest.split("\t", 9)
                raw[int(f[0])] = {
                    "ppid": int(f[1]),
                    "state": f[2],
                    "ticks": _int(f[3]) + _int(f[4]),
                    "rss_kib": _int(f[5]),
                    "threads": _int(f[6]),
                    "start": _int(f[7]),
                    "wchan": f[8],
                    "name": f[9],
                }
            elif kind == "cmd":
                pid, _, command = rest.partition("\t")
                commands[int(pid)] = command.strip()
            elif kind == "task":
                f = rest.split("\t", 6)
                tick = _int(f[3]) + _int(f[4])
                tasks.setdefault(int(f[0]), []).append((int(f[1]), f[2], tick, f[5], f[6]))
            elif line.strip():
                bad += 1
        except (ValueError, IndexError):
            bad += 1
    procs = tuple(
        Proc(
            pid=pid,
            ppid=r["ppid"],
            state=r["state"],
            cpu_seconds=r["ticks"] / clk,
            rss_bytes=r["rss_kib"] * 1024,
            threads=r["threads"],
            start_ticks=r["start"],
            wchan=_wchan(r["wchan"]),
            name=r["name"],
            command=commands.get(pid, ""),
            tasks=tuple(
                Task(tid, state, ticks / clk, _wchan(w), name)
                for tid, state, ticks, w, name in sorted(tasks.get(pid, []))
            ),
        )
        for pid, r in sorted(raw.items())
    )
    problems = (f"{bad} line(s) of the process listing did not parse",) if bad else ()
    return ProcTree(procs, clk, uid, problems)


def _wchan(text: str) -> str:
    return "" if text.strip() in ("", "0") else text.strip()


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

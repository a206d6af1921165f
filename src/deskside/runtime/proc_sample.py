"""One look at a node's engine processes, taken on the node in one round trip: each
process's state letter and CPU time from /proc/PID/stat, its title from /proc/PID/cmdline,
the node's clock and clock tick, and when the engine's log last grew.

Which processes: for the process control, the members of the engine's session (its leader
proven by start time and run tag, as `deskside.runtime.node_sh` does); for
systemd, the processes in the cgroup of the unit's main process.
"""

from __future__ import annotations

from deskside.runtime.node_sh import _PID_SH, _STAT_SH
from deskside.survive.history import computes
from deskside.survive.observe import ProcessSample

# /proc/PID/stat after "pid (comm) ": $1 state, $12 utime, $13 stime (clock ticks; proc(5)
# fields 3, 14 and 15).
_EMIT_SH = r"""
emit() {
  read -r st < "/proc/$1/stat" 2>/dev/null || return 0
  rest=${st##*) }
  name=$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | cut -c1-80)
  set -- "$1" $rest
  echo "p $1 $2 ${13} ${14} $name"
}
head_lines() {
  echo "now $(date +%s)"
  echo "tck $(getconf CLK_TCK 2>/dev/null || echo 100)"
  if [ -n "$log" ] && [ -f "$log" ]; then echo "log $(stat -c %Y -- "$log")"; fi
}
"""

# Every live member of the session (not zombies), tagged or not: vLLM's setproctitle
# (`VLLM::Worker_TP1`) overwrites the memory /proc/PID/environ reads, so its ranks no longer
# show the run's tag.
# Reading is safe: the leader is proven (start time and tag), and no process can join
# another's session from outside.
_SESSION_SH = r"""
session() {
  for f in /proc/[0-9]*/stat; do
    read -r st < "$f" 2>/dev/null || continue
    rest=${st##*) }
    set -- $rest
    [ "$4" = "$sid" ] || continue
    case $1 in Z|X) continue ;; esac
    p=${f#/proc/}
    echo "${p%/stat}"
  done
}
"""

SESSION_SAMPLE_SH = (
    "sid=$1; start=${2:-}; tag=${3:-}; log=${4:-}\n"
    + _PID_SH
    + _STAT_SH
    + _SESSION_SH
    + _EMIT_SH
    + r"""
head_lines
if replaced; then exit 0; fi
for p in $(session); do emit "$p"; done
"""
)

# every process whose cgroup line (v2 "0::", else v1 "name=systemd") is the main
# process's cgroup or below it
CGROUP_SAMPLE_SH = (
    "main=$1; log=${2:-}\n"
    + _EMIT_SH
    + r"""
head_lines
case $main in ''|*[!0-9]*|0|1) exit 0 ;; esac
want=
while IFS= read -r line; do
  case $line in 0::*) want=$line ;; *:name=systemd:*) [ -n "$want" ] || want=$line ;; esac
done < "/proc/$main/cgroup" 2>/dev/null
[ -n "$want" ] || exit 0
for f in /proc/[0-9]*/cgroup; do
  p=${f#/proc/}; p=${p%/cgroup}
  while IFS= read -r line; do
    case $line in "$want"|"$want"/*) emit "$p"; break ;; esac
  done < "$f" 2>/dev/null
done
"""
)


def session_sample(pid: int, start: int | None, tag: str | None, log: str | None) -> list[str]:
    identity = ["" if start is None else str(start), tag or ""]
    return ["sh", "-c", SESSION_SAMPLE_SH, "sh", str(pid), *identity, log or ""]


def cgroup_sample(main_pid: int, log: str | None = None) -> list[str]:
    return ["sh", "-c", CGROUP_SAMPLE_SH, "sh", str(main_pid), log or ""]


def parse_sample(
    stdout: str, node: str, role: str, at: float
) -> tuple[list[ProcessSample], float | None]:
    """The node's processes (stamped `at`, the observer's clock) and how long its log has
    been silent (by the node's own clock; None without a log)."""
    values: dict[str, str] = {}
    rows: list[tuple[int, str, int, str]] = []
    for line in stdout.splitlines():
        kind, _, rest = line.partition(" ")
        if kind in ("now", "tck", "log"):
            values[kind] = rest.strip()
            continue
        if kind != "p":
            continue
        parts = rest.split(" ", 4)
        if len(parts) < 4 or not all(x.isdigit() for x in (parts[0], parts[2], parts[3])):
            continue
        name = parts[4].strip() if len(parts) > 4 else ""
        rows.append((int(parts[0]), parts[1], int(parts[2]) + int(parts[3]), name))
    try:
        tck = float(values.get("tck", "100")) or 100.0
        node_now = float(values["now"]) if "now" in values else None
        silent = node_now - float(values["log"]) if node_now and "log" in values else None
    except ValueError:
        tck, silent = 100.0, None
    samples = [
        ProcessSample(
            at=at,
            node=node,
            role=role,
            pid=pid,
            alive=True,
            state=state[:1] or None,
            cpu_seconds=ticks / tck,
            log_silent_seconds=max(silent, 0.0) if silent is not None else None,
            name=name or None,
            computes=computes(name),
        )
        for pid, state, ticks, name in rows
    ]
    return samples, silent


__all__ = ["cgroup_sample", "parse_sample", "session_sample"]

"""The commands deskside runs on a node to follow and stop the processes it started, and
their parsers. Pure: argv lists and POSIX sh scripts; a Transport runs them (this machine,
one of its network namespaces, or an SSH host alike).

A started process is known by three facts recorded at start: its session leader's pid,
that process's start time (clock ticks since boot) and its run tag (see
`deskside.identity`). Watching reads the node's process table
(`deskside.facts.procs`) and judges it in Python; stopping runs `STOP_SESSION_SH`, which
checks start time and tag again on the node right before it signals (atomic enough: no
round trip between the check and the signal) and refuses a claim without them.
"""

from __future__ import annotations

from dataclasses import dataclass

from deskside.facts.procs import RUN_TAG as RUN_TAG
from deskside.facts.procs import TABLE_SH, ProcessTable, parse_stat, split_table

# Positional checks every script starts with: a pid deskside may act on (never 0, 1 or junk).
_PID_SH = r"""
case $sid in ''|*[!0-9]*|0|1) echo "refusing to act on pid '$sid'" >&2; exit 2 ;; esac
"""

# The stop's own check, on the node. The fields after "pid (comm) " of /proc/PID/stat: $1
# state, $2 ppid, $4 session, ${20} starttime; the command may hold spaces and parentheses:
# split after the last ") ". `read` (a builtin: no process per entry) takes the first line;
# a command name with a newline cuts it short of its 20 fields (a name holds 15 bytes at
# most), and the whole file is read then.
_STAT_SH = (
    r"""
stat_fields() {
  _sp=$1
  read -r st < "/proc/$_sp/stat" 2>/dev/null || return 1
  rest=${st##*) }
  set -- $rest
  if [ "$#" -lt 20 ]; then
    st=$(cat "/proc/$_sp/stat" 2>/dev/null) || return 1
    rest=${st##*) }
  fi
}
# the recorded leader $sid was replaced by another process (its start time differs, or it
# lacks the run's tag)
replaced() {
  stat_fields "$sid" || return 1
  set -- $rest
  [ "${20}" = "$start" ] || return 0
  ! tagged "$sid"
}
# process $1 carries the run's tag: an item of its environment is exactly RUN_TAG=$tag. A
# process title set over the environment (setproctitle writes NUL bytes over its start; an
# environment never starts with one) hides the tag: such a process counts when its parent,
# in the same session, does; one whose environment reads normally without it never does.
tagged() {
  _tq=$1; _tn=0
  while [ "$_tn" -lt 16 ]; do
    if grep -a -z -qxF -- "RUN_TAG=$tag" "/proc/$_tq/environ" 2>/dev/null; then return 0; fi
    [ -n "$(grep -a -z -c '' "/proc/$_tq/environ" 2>/dev/null)" ] || return 1
    case $(grep -a -z -n -m 1 -o '^.' "/proc/$_tq/environ" 2>/dev/null | head -c 2) in
      1:) return 1 ;;
    esac
    stat_fields "$_tq" || return 1
    set -- $rest
    [ "$4" = "$sid" ] || return 1
    _tq=$2; _tn=$((_tn + 1))
  done
  return 1
}
"""
).replace("RUN_TAG", RUN_TAG)

# Members of session $sid (not zombies) that carry the tag, from /proc (no ps needed).
_MEMBERS_SH = r"""
members() {
  for f in /proc/[0-9]*/stat; do
    p=${f#/proc/}
    p=${p%/stat}
    stat_fields "$p" || continue
    set -- $rest
    [ "$4" = "$sid" ] || continue
    case $1 in Z|X) continue ;; esac
    tagged "$p" || continue
    echo "$p"
  done
}
"""

STOP_SESSION_SH = (
    "sid=$1; grace=$2; start=${3:-}; tag=${4:-}; export LC_ALL=C\n"
    + _PID_SH
    + r"""
case $start in
  ''|*[!0-9]*) echo "refusing to signal pid $sid: no start time recorded for it" >&2; exit 2 ;;
esac
if [ -z "$tag" ]; then
  echo "refusing to signal pid $sid: no run tag recorded for it" >&2; exit 2
fi
"""
    + _STAT_SH
    + _MEMBERS_SH
    + r"""
if replaced; then
  echo "pid $sid is not the process deskside started (start time or tag): left alone" >&2
  exit 0
fi
# The members as they are now, each with its start time: once the leader exits, a rank whose
# tag only its parent proved is reparented out of that proof, yet stays this engine's.
snap=$(for p in $(members); do
  stat_fields "$p" || continue; set -- $rest; echo "$p:${20}"
done)
[ -n "$snap" ] || exit 0
# the snapshot's processes still alive with the same start time, and the members now
left() {
  for e in $snap; do
    stat_fields "${e%%:*}" || continue
    set -- $rest
    case $1 in Z|X) continue ;; esac
    [ "${20}" = "${e#*:}" ] && echo "${e%%:*}"
  done
  members
}
signal_all() { for p in $(left | sort -u); do kill "-$1" "$p" 2>/dev/null; done; }
signal_all TERM
# a process stopped by a signal or a debugger takes SIGTERM only once continued
signal_all CONT
i=0; ticks=$((grace * 5))
while [ "$i" -lt "$ticks" ]; do
  [ -n "$(left)" ] || exit 0
  sleep 0.2; i=$((i + 1))
done
signal_all KILL
i=0
while [ "$i" -lt 50 ]; do
  [ -n "$(left)" ] || exit 0
  sleep 0.1; i=$((i + 1))
done
echo "session $sid still has processes: $(left | sort -u | tr '\n' ' ')" >&2
exit 1
"""
)


def stop_session(pid: int, grace: float, start: int, tag: str) -> list[str]:
    """SIGTERM every tagged process of session `pid`, SIGKILL what is left after `grace`
    seconds. Exit 0: nothing of it is left (or `pid` is another process now); 2: refused
    (no start time or tag). Built by `deskside.identity.stop_command` only."""
    return ["sh", "-c", STOP_SESSION_SH, "sh", str(pid), str(max(1, round(grace))), str(start), tag]


def refuse(message: str) -> list[str]:
    """A command that only says why nothing is done, and fails (exit 2)."""
    return ["sh", "-c", 'printf "%s\\n" "$1" >&2; exit 2', "sh", message]


# Signal a process a person named, only while it is still the same process (start time)
# and never pid 0 or 1.
STOP_PID_SH = (
    "sid=$1; start=${2:-}\n"
    + _PID_SH
    + r"""
case $start in ''|*[!0-9]*) echo "refusing to signal pid $sid: no start time" >&2; exit 2 ;; esac
stat_fields() {
  read -r st < "/proc/$1/stat" 2>/dev/null || return 1
  rest=${st##*) }
}
stat_fields "$sid" || { echo "pid $sid is gone" >&2; exit 3; }
set -- $rest
if [ "${20}" != "$start" ]; then echo "pid $sid is another process now" >&2; exit 3; fi
kill -TERM "$sid"
"""
)


def stop_pid(pid: int, start: int) -> list[str]:
    """SIGTERM to `pid` while it has start time `start` (built by
    `deskside.identity.stop_named` only)."""
    return ["sh", "-c", STOP_PID_SH, "sh", str(pid), str(start)]


# A log deskside wrote, read only as a regular file with no link in its path from the
# node's folder down (a link planted there would show another file): `own_file FILE ROOT`.
OWN_FILE_SH = r"""
own_file() {
  f=$1; root=${2%/}
  case $f in "$root"/*) ;; *) echo "$f is not under $root: not read" >&2; return 3 ;; esac
  if [ -L "$root" ]; then echo "$root is a link: not read" >&2; return 3; fi
  if [ -L "$f" ] || [ ! -f "$f" ]; then
    echo "$f is a link or not a file: not read" >&2; return 3
  fi
  d=${f%/*}
  while [ "$d" != "$root" ]; do
    if [ -L "$d" ]; then echo "$d is a link: not read" >&2; return 3; fi
    d=${d%/*}
  done
}
"""

# The process table and what the log at $1 grew by since byte $2 (read only when it is
# the node's own file below $3): one round trip per poll.
POLL_SH = (
    "log=$1; off=$2; root=$3\n"
    + TABLE_SH
    + OWN_FILE_SH
    + r"""
proc_table
size=0
if own_file "$log" "$root" 2>/dev/null; then size=$(wc -c < "$log"); fi
size=$((size + 0))
echo "size=$size"
if [ "$size" -gt "$off" ]; then tail -c "+$((off + 1))" -- "$log" | head -c "$((size - off))"; fi
"""
)


def poll_process(log: str, offset: int, root: str | None = None) -> list[str]:
    """`POLL_SH` for the log at `log` below the node's folder `root` (default: the log's
    own folder)."""
    return ["sh", "-c", POLL_SH, "sh", log, str(offset), root or log.rsplit("/", 1)[0]]


@dataclass(frozen=True)
class Poll:
    table: ProcessTable
    size: int  # of the log
    chunk: bytes  # the log since the offset asked for


def parse_poll(stdout: str) -> Poll:
    """The table, the log's size and its new bytes from `poll_process` output
    (`deskside.facts.base.FactError` when the table is not there)."""
    table, rest = split_table(stdout)
    header, _, chunk = rest.partition("\n")
    size = header.removeprefix("size=")
    return Poll(table, int(size) if size.isdigit() else 0, chunk.encode())


PROC_START_SH = r"""
case $1 in ''|*[!0-9]*) exit 2 ;; esac
head -c 4096 -- "/proc/$1/stat"
"""


def proc_start(pid: int) -> list[str]:
    """The /proc/PID/stat of `pid` (its start time is recorded at start)."""
    return ["sh", "-c", PROC_START_SH, "sh", str(pid)]


def parse_proc_start(stdout: str) -> int | None:
    stat = parse_stat(stdout)
    return stat.start_ticks if stat is not None else None


# The last $2 lines (at most $3 bytes) of the node's own file $1 below $4.
TAIL_SH = (
    OWN_FILE_SH
    + r"""
own_file "$1" "$4" || exit 3
tail -n "$2" -- "$1" | tail -c "$3"
"""
)


def tail_file(
    path: str, lines: int, root: str | None = None, max_bytes: int = 1 << 20
) -> list[str]:
    """The end of a log deskside wrote, below the node's folder `root` (default: the
    log's own folder): never through a link."""
    return [
        "sh",
        "-c",
        TAIL_SH,
        "sh",
        path,
        str(lines),
        str(max_bytes),
        root or path.rsplit("/", 1)[0],
    ]

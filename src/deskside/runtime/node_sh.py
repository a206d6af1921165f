"""The commands deskside runs on a node to watch, measure and stop the engines it started,
and their parsers. Pure: argv lists and POSIX sh scripts; a Transport runs them (this
machine, one of its network namespaces, or an SSH host alike).

A started engine is known by three facts recorded at start: its session leader's pid, that
process's start time (field 22 of /proc/PID/stat, clock ticks since boot), and the
`DESKSIDE_RUN` tag deskside put in its environment (inherited through every exec and by every
process it starts). A pid whose start time differs is another process that reused the number;
a process without the tag is not the engine's: both are reported, never signalled. Only
processes of the engine's session that carry the tag are signalled, and never pid 0 or 1.
"""

from __future__ import annotations

RUN_TAG = "DESKSIDE_RUN"
"""The environment variable that marks every process of an engine deskside started."""

# Positional checks every script starts with: a pid deskside may act on (never 0, 1 or junk).
_PID_SH = r"""
case $sid in ''|*[!0-9]*|0|1) echo "refusing to act on pid '$sid'" >&2; exit 2 ;; esac
"""

# The fields after "pid (comm) " of /proc/PID/stat: $1 state, $2 ppid, $3 pgrp, $4 session,
# ... ${20} starttime. The command may hold spaces and parentheses: split after the last ") ".
_STAT_SH = r"""
stat_fields() {
  read -r st < "/proc/$1/stat" 2>/dev/null || return 1
  rest=${st##*) }
}
# the recorded leader $sid was replaced by another process (its start time differs, or it
# lacks the run's tag)
replaced() {
  stat_fields "$sid" || return 1
  if [ -n "$start" ]; then
    set -- $rest
    [ "${20}" = "$start" ] || return 0
  fi
  ! tagged "$sid"
}
# process $1 carries the run's tag in its environment (no tag recorded: every process does).
# A process title set over the environment (setproctitle writes NUL bytes over its start, as
# vLLM does for `VLLM::Worker_TP1`; an environment never starts with one) hides the tag:
# such a process counts when its parent, in the same session, does; one whose environment
# reads normally without the tag never does.
tagged() {
  [ -n "$tag" ] || return 0
  _tq=$1; _tn=0
  while [ "$_tn" -lt 16 ]; do
    if tr '\0' '\n' < "/proc/$_tq/environ" 2>/dev/null | grep -qxF "DESKSIDE_RUN=$tag"; then
      return 0
    fi
    [ -r "/proc/$_tq/environ" ] || return 1
    [ -z "$(head -c 1 "/proc/$_tq/environ" 2>/dev/null | tr -d '\0')" ] || return 1
    read -r _tst < "/proc/$_tq/stat" 2>/dev/null || return 1
    _trest=${_tst##*) }
    set -- $_trest
    [ "$4" = "$sid" ] || return 1
    _tq=$2; _tn=$((_tn + 1))
  done
  return 1
}
"""

# Members of session $sid (not zombies), from /proc (no ps needed). `read` is a builtin: no
# process per entry.
_MEMBERS_SH = r"""
members() {
  for f in /proc/[0-9]*/stat; do
    read -r st < "$f" 2>/dev/null || continue
    rest=${st##*) }
    set -- $rest
    [ "$4" = "$sid" ] || continue
    case $1 in Z|X) continue ;; esac
    p=${f#/proc/}
    p=${p%/stat}
    tagged "$p" || continue
    echo "$p"
  done
}
"""

STOP_SESSION_SH = (
    "sid=$1; grace=$2; start=${3:-}; tag=${4:-}\n"
    + _PID_SH
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


def _identity(start: int | None, tag: str | None) -> list[str]:
    return ["" if start is None else str(start), tag or ""]


def stop_session(
    pid: int, grace: float, start: int | None = None, tag: str | None = None
) -> list[str]:
    """SIGTERM every tagged process of session `pid`, SIGKILL what is left after `grace`
    seconds. Exit 0: nothing of the engine is left (or `pid` is another process now)."""
    return [
        "sh",
        "-c",
        STOP_SESSION_SH,
        "sh",
        str(pid),
        str(max(1, round(grace))),
        *_identity(start, tag),
    ]


SESSION_STATS_SH = (
    "sid=$1; start=${2:-}; tag=${3:-}\n"
    + _PID_SH
    + _STAT_SH
    + _MEMBERS_SH
    + r"""
n=0; rss=0
if ! replaced; then
  for p in $(members); do
    n=$((n + 1))
    while read -r k v _; do
      if [ "$k" = "VmRSS:" ]; then rss=$((rss + v)); fi
    done < "/proc/$p/status" 2>/dev/null
  done
fi
echo "processes=$n rss_kib=$rss"
"""
)


def session_stats(pid: int, start: int | None = None, tag: str | None = None) -> list[str]:
    return ["sh", "-c", SESSION_STATS_SH, "sh", str(pid), *_identity(start, tag)]


def parse_session_stats(stdout: str) -> tuple[int, int]:
    """(processes, rss bytes) from `session_stats` output."""
    values = dict(w.split("=", 1) for w in stdout.split() if "=" in w)
    try:
        return int(values.get("processes", 0)), int(values.get("rss_kib", 0)) * 1024
    except ValueError:
        return 0, 0


# Is the session leader $pid alive (not a zombie, still leading its session, the process
# that was started), and what did its log grow by since byte $off? One round trip per poll.
POLL_SH = (
    "pid=$1; log=$2; off=$3; sid=$1; start=${4:-}; tag=${5:-}\n"
    + _PID_SH
    + _STAT_SH
    + r"""
alive=0
if stat_fields "$pid" && ! replaced; then
  set -- $rest
  case $1 in Z|X) ;; *) if [ "$4" = "$pid" ]; then alive=1; fi ;; esac
fi
size=0
if [ -f "$log" ]; then size=$(wc -c < "$log"); fi
size=$((size + 0))
echo "alive=$alive size=$size"
if [ "$size" -gt "$off" ]; then tail -c "+$((off + 1))" -- "$log" | head -c "$((size - off))"; fi
"""
)


def poll_process(
    pid: int, log: str, offset: int, start: int | None = None, tag: str | None = None
) -> list[str]:
    return ["sh", "-c", POLL_SH, "sh", str(pid), log, str(offset), *_identity(start, tag)]


def parse_poll(stdout: str) -> tuple[bool, int, bytes]:
    """(alive, log size, new log bytes) from `poll_process` output."""
    header, _, rest = stdout.partition("\n")
    values = dict(w.split("=", 1) for w in header.split() if "=" in w)
    try:
        size = int(values.get("size", "0"))
    except ValueError:
        size = 0
    return values.get("alive") == "1", size, rest.encode()


PROC_START_SH = r"""
read -r st < "/proc/$1/stat" 2>/dev/null || exit 1
rest=${st##*) }
set -- $rest
echo "start=${20}"
"""


def proc_start(pid: int) -> list[str]:
    """The start time of process `pid` (recorded at start: see the module docstring)."""
    return ["sh", "-c", PROC_START_SH, "sh", str(pid)]


def parse_proc_start(stdout: str) -> int | None:
    for word in stdout.split():
        if word.startswith("start=") and word[6:].isdigit():
            return int(word[6:])
    return None


def tail_file(path: str, lines: int) -> list[str]:
    return ["tail", "-n", str(lines), "--", path]


# Shared memory segments of vLLM, torch and Python multiprocessing: removed when new since
# the run started ("$@": the names present then) and open or mapped by no live process
# (another run's segments stay).
SHM_PREFIXES = ("psm_", "vllm", "torch_", "sem.mp-")
SHM_CLEAN_SH = r"""
inuse=$( { ls -l /proc/[0-9]*/fd 2>/dev/null; cat /proc/[0-9]*/maps 2>/dev/null; } \
  | grep -o '/dev/shm/[^ ]*' | sort -u)
for f in /dev/shm/*; do
  [ -e "$f" ] || continue
  name=${f##*/}
  case $name in psm_*|vllm*|torch_*|sem.mp-*) ;; *) continue ;; esac
  old=0
  for b in "$@"; do [ "$b" = "$name" ] && old=1 && break; done
  [ "$old" = 0 ] || continue
  case "
$inuse
" in *"
/dev/shm/$name
"*) continue ;; esac
  rm -f -- "$f" && echo "$name"
done
"""


def shm_list() -> list[str]:
    return ["ls", "-1", "--", "/dev/shm"]


def shm_clean(before: list[str]) -> list[str]:
    return ["sh", "-c", SHM_CLEAN_SH, "sh", *before]

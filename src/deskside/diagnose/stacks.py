"""Where each engine process is stuck: its Python stacks (`py-spy dump --pid PID`, when
py-spy is on the node's PATH or beside the engine's Python), and for every thread its state,
kernel wait channel and kernel stack (/proc/PID/task/TID/stack, readable by root only).

Names come from /proc/PID/comm, thread states from the `State:` line of
/proc/PID/task/TID/status (the stat lines are read by `deskside.facts.procs` alone).
py-spy runs on Python processes only (by /proc/PID/exe, where it can be read). A non-root
login reads kernel stacks and runs py-spy through `sudo -n` when sudo lets it
without a password, else says what it could not read. py-spy attaches for a moment (ptrace)
and is given `TIMEOUT` seconds per process. The command is POSIX sh run through the node's
Transport; what it prints is the bundle's member as is (sections per process and thread).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath

from deskside.diagnose.procs import Proc

TIMEOUT = 20  # seconds per `py-spy dump`
MAX_DUMP_BYTES = 1 << 20  # of one process's py-spy output

STACKS_SH = r"""
dirs=$1; timeout_s=$2; max=$3; shift 3
pyspy=$(command -v py-spy 2>/dev/null)
if [ -z "$pyspy" ]; then
  old_ifs=$IFS; IFS=:
  for d in $dirs; do
    if [ -x "$d/py-spy" ]; then pyspy=$d/py-spy; break; fi
  done
  IFS=$old_ifs
fi
as=
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as="sudo -n"
fi
if [ -z "$pyspy" ]; then
  echo "py-spy: not found on the PATH${dirs:+ nor in $dirs}" \
    "(pip install py-spy on the node for Python stacks)"
elif ! command -v timeout >/dev/null 2>&1; then
  echo "py-spy: $pyspy found, but no timeout program to bound it: not run"
  pyspy=
else
  echo "py-spy: $pyspy${as:+ (through $as)}"
fi
if [ "$(id -u)" != 0 ] && [ -z "$as" ]; then
  echo "kernel stacks: readable by root only (log in as root, or allow sudo -n)"
fi
for p in "$@"; do
  comm=
  if ! read -r comm < "/proc/$p/comm" 2>/dev/null; then
    echo; echo "=== process $p: gone"; continue
  fi
  echo
  echo "=== process $p ($comm)"
  exe=$(readlink "/proc/$p/exe" 2>/dev/null)
  if [ -n "$pyspy" ]; then
    case ${exe##*/} in
      ''|python*|pypy*)
        echo "--- py-spy dump --pid $p"
        $as env RUST_BACKTRACE=0 timeout -k 5 "$timeout_s" "$pyspy" dump --pid "$p" 2>&1 \
          | head -c "$max"
        echo ;;
      *) echo "--- py-spy: not run ($exe is not a Python)" ;;
    esac
  fi
  for tf in /proc/$p/task/[0-9]*; do
    tcomm=; read -r tcomm < "$tf/comm" 2>/dev/null || continue
    state=?
    while read -r k v _; do
      if [ "$k" = "State:" ]; then state=$v; break; fi
    done < "$tf/status" 2>/dev/null
    w=; read -r w < "$tf/wchan" 2>/dev/null
    echo "--- thread ${tf##*/} ($tcomm) state $state wchan ${w:-0}"
    if [ "$(id -u)" = 0 ]; then
      while IFS= read -r line; do echo "$line"; done < "$tf/stack" 2>/dev/null \
        || echo "(kernel stack not readable)"
    elif [ -n "$as" ]; then
      $as cat -- "$tf/stack" 2>/dev/null || echo "(kernel stack not readable)"
    fi
  done
done
"""


def python_dirs(procs: Sequence[Proc]) -> list[str]:
    """Folders where a py-spy beside the engine's Python may be: the folder of each
    absolute program path of the processes' command lines (a venv's bin/)."""
    out: list[str] = []
    for p in procs:
        program = p.command.split(" ", 1)[0]
        if program.startswith("/") and "python" in PurePosixPath(program).name:
            folder = str(PurePosixPath(program).parent)
            if folder not in out and ":" not in folder:
                out.append(folder)
    return out


def stacks_command(pids: Sequence[int], dirs: Sequence[str] = ()) -> list[str]:
    return [
        "sh",
        "-c",
        STACKS_SH,
        "sh",
        ":".join(dirs),
        str(TIMEOUT),
        str(MAX_DUMP_BYTES),
        *(str(p) for p in pids),
    ]


def stacks_timeout(pids: Sequence[int]) -> float:
    """How long the stacks command may take: py-spy's limit per process and a margin, five
    minutes at most."""
    return min(60.0 + (TIMEOUT + 5) * len(pids), 300.0)

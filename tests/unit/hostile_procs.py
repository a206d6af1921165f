"""A session of hostile processes for the process table's tests, started by the test itself:
a leader carrying a run tag and children whose command names, command lines and
environments try everything a /proc reader can trip on. `python -m tests.unit.hostile_procs
OUT` records the table they make (run inside a PID namespace of its own, so that only they
show: see test_facts_procs.py)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TAG = "hostile/node0/20260101000000/engine"
ODD_COMM = "a) (b\nc) d"  # spaces, parentheses and a newline, within the 15 bytes of comm
FORGED_TITLE = "x\n== nul ==\n1/environ:DESKSIDE_RUN=forged\n1/stat:1 (y) S 0 0 0"

# each child prints `role pid` once it runs; `exec` keeps the pid
CHILDREN = {
    "odd": """import ctypes, os, sys, time
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)
os.write(1, f"odd {os.getpid()}\\n".encode()); time.sleep(300)""",
    "forger": """import os, setproctitle, sys, time
setproctitle.setproctitle(sys.argv[1])
os.write(1, f"forger {os.getpid()}\\n".encode()); time.sleep(300)""",
    "titled": """import os, setproctitle, time
setproctitle.setproctitle("VLLM::Worker_TP1")
os.write(1, f"titled {os.getpid()}\\n".encode()); time.sleep(300)""",
    "bigenv": """import os
env = {f"BIG{i}": "x" * 100_000 for i in range(12)}
env["DESKSIDE_RUN"] = os.environ["DESKSIDE_RUN"]
os.execve("/bin/sh", ["sh", "-c", "echo bigenv $$; exec sleep 300"], env)""",
    "oddenv": """import os
os.write(1, f"oddenv {os.getpid()}\\n".encode())
os.execve("/bin/sleep", ["sleep", "300"], {b"\\xffA": b"1", b"PATH": b"/bin"})""",
    "zombie": """import os, time
child = os.fork()
if child == 0:
    os._exit(0)
os.write(1, f"zombie {child}\\nreaper {os.getpid()}\\n".encode()); time.sleep(300)""",
}

LEADER_SH = r"""
py=$1; odd=$2; title=$3
"$py" -c "$CHILD_odd" "$odd" &
"$py" -c "$CHILD_forger" "$title" &
"$py" -c "$CHILD_titled" &
"$py" -c "$CHILD_zombie" &
"$py" -c "$CHILD_oddenv" &
env -u DESKSIDE_RUN sh -c 'echo untagged $$; exec sleep 300' &
env -i sh -c 'echo emptyenv $$; exec sleep 300' &
env DESKSIDE_RUN="$LONG_TAG" sh -c 'echo longtag $$; exec sleep 300' &
"$py" -c "$CHILD_bigenv" &
sh -c 'echo badbytes $$; sleep 300; :' sh "$(printf 'tab\there\377\376')" &
sh -c 'echo manyargs $$; sleep 300; :' sh $(seq 1 100) &
echo "leader $$"
wait
"""


@dataclass
class Hostile:
    leader: subprocess.Popen[bytes]
    pids: dict[str, int]

    @property
    def sid(self) -> int:
        return self.leader.pid


def _env() -> dict[str, str]:
    env = {**os.environ, "DESKSIDE_RUN": TAG, "LONG_TAG": "y" * 1000}
    env.update({f"CHILD_{role}": code for role, code in CHILDREN.items()})
    return env


@contextlib.contextmanager
def hostile(python: str = sys.executable) -> Iterator[Hostile]:
    """Start the session; yield it once every child runs; kill it all afterwards."""
    leader = subprocess.Popen(
        ["sh", "-c", LEADER_SH, "sh", python, ODD_COMM, FORGED_TITLE],
        env=_env(),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    pids: dict[str, int] = {}
    try:
        assert leader.stdout is not None
        want = {*CHILDREN, "reaper", "untagged", "emptyenv", "longtag", "badbytes"}
        want |= {"manyargs", "leader"}
        deadline = time.monotonic() + 30
        lines = b""
        while not want <= set(pids) and time.monotonic() < deadline:
            ready, _, _ = select.select([leader.stdout], [], [], deadline - time.monotonic())
            if not ready:
                break
            lines += os.read(leader.stdout.fileno(), 4096)
            for line in lines.decode().splitlines():
                role, _, pid = line.partition(" ")
                if pid.strip().isdigit():
                    pids[role] = int(pid)
        assert want <= set(pids), pids
        time.sleep(0.3)  # the shells that echoed have exec'd their sleep
        yield Hostile(leader, pids)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader.pid, signal.SIGKILL)
        leader.wait(timeout=10)


def record(out: Path) -> None:
    """Write the table this PID namespace shows while the hostile session runs."""
    from deskside.facts.procs import PROCESSES

    with hostile() as h:
        text = subprocess.run(PROCESSES.argv(), capture_output=True, check=True).stdout
        roles = "".join(f"{role} {pid}\n" for role, pid in sorted(h.pids.items()))
    # this machine's paths are not part of the recording
    text = text.replace(sys.executable.encode(), b"/usr/bin/python3")
    out.write_bytes(text)
    out.with_suffix(".pids").write_text(roles)


if __name__ == "__main__":
    record(Path(sys.argv[1]))

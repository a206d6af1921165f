"""The engine's processes for a diagnosis: the parsers of the node commands' output (pure),
the text view, and the commands themselves run on this machine against a process tree this
test starts (a session leader, a child with threads, a stopped child)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deskside.diagnose.procs import (
    Proc,
    parse_pids,
    parse_session_pids,
    parse_tree,
    render_tree,
    session_pids_command,
    thread_states,
    tree_command,
)
from deskside.diagnose.stacks import python_dirs, stacks_command, stacks_timeout
from deskside.facts.procs import RUN_TAG
from deskside.runtime.node_sh import parse_proc_start, proc_start
from deskside.transport.local import LocalTransport

from .proc_tables import P, table_text, tagged


def _task(pid: int, tid: int, state: str, utime: int, stime: int, wchan: str, comm: str) -> str:
    stat = P(tid, state=state, utime=utime, stime=stime, comm=comm).stat()
    return f"{pid}/task/{tid}/stat:{stat}{pid}/task/{tid}/wchan:{wchan}\n"


# as the node prints it: the roots, the process table, every thread (and one junk line)
TREE = (
    "roots 200\n"
    + table_text(
        [
            P(1, 0, comm="init", start=1),
            P(
                200,
                1,
                777,
                "python3",
                "S",
                utime=150,
                stime=50,
                threads=2,
                rss_pages=512,
                argv=(
                    "/venv/bin/python3",
                    "-m",
                    "vllm.entrypoints.openai.api_server",
                    "--port",
                    "8000",
                ),
            ),
            P(
                210,
                200,
                780,
                "VLLM::Worker_TP",
                "R",
                utime=1000,
                rss_pages=1024,
                argv=("VLLM::Worker_TP0",),
            ),
            P(220, 210, 790, "pt main (x) y", "Z"),
            P(300, 1, 800, "unrelated"),
        ]
    ).replace("== nul ==", "garbage line\n== nul ==")
    + "200/wchan:do_select\n210/wchan:0\n"
    + _task(200, 200, "S", 100, 20, "do_select", "python3")
    + _task(200, 201, "D", 50, 30, "nfs_wait_bit_killable", "python3")
    + _task(210, 210, "R", 1000, 0, "0", "VLLM::Worker_TP")
    + _task(300, 300, "S", 0, 0, "0", "unrelated")
)


def test_parse_tree() -> None:
    tree = parse_tree(TREE)
    assert tree.clk_tck == 100 and tree.uid == 0 and tree.pids == [200, 210, 220]
    api, worker, zombie = tree.procs
    assert (api.ppid, api.state, api.cpu_seconds, api.rss_bytes) == (1, "S", 2.0, 2048 * 1024)
    assert api.threads == 2 and api.start_ticks == 777 and api.wchan == "do_select"
    assert api.command.startswith("/venv/bin/python3 -m vllm")
    assert [(t.tid, t.state, t.wchan) for t in api.tasks] == [
        (200, "S", "do_select"),
        (201, "D", "nfs_wait_bit_killable"),
    ]
    assert api.tasks[1].cpu_seconds == 0.8
    assert worker.wchan == "" and worker.name == "VLLM::Worker_TP" and worker.cpu_seconds == 10.0
    assert zombie.state == "Z" and zombie.name == "pt main (x) y" and zombie.tasks == ()
    assert tree.problems == ("1 line(s) of the process listing did not parse",)
    assert thread_states(api) == "1 D, 1 S" or thread_states(api) == "1 S, 1 D"
    assert tree.to_dict()["procs"][0]["tasks"][1]["state"] == "D"


def test_render_tree_indents_children_and_lists_threads() -> None:
    text = render_tree(parse_tree(TREE), "node0 (head): the engine's processes")
    lines = text.splitlines()
    assert lines[0] == "node0 (head): the engine's processes"
    row = {line.split()[0]: line for line in lines if line.strip()[:3].isdigit()}
    assert row["200"].endswith(" python3") and " do_select " in row["200"]
    assert row["210"].endswith("   VLLM::Worker_TP")  # one level down
    assert row["220"].endswith("     pt main (x) y")  # two levels down
    assert "nfs_wait_bit_killable" in text and "pid 210 (VLLM::Worker_TP): VLLM::Worker_TP0" in text
    assert render_tree(parse_tree(""), "t").splitlines()[-1] == "(no process)"


def test_parse_session_and_pids() -> None:
    tag = "r/n/20260101000000/engine"
    table = table_text(
        [
            tagged(12, tag, start=5),
            tagged(13, tag, ppid=12, session=12, start=6),
            P(14, ppid=12, session=12, start=7),  # its environment reads, without the tag
            P(15, ppid=1, session=15, start=8, state="Z"),
        ]
    )

    def claim(pid: int, start: str, tag: str) -> str:
        return f"{table}claim\n{pid}\n{start}\n{tag}"

    assert parse_session_pids(claim(12, "5", tag)) == ("session", [12, 13])
    assert parse_session_pids(claim(12, "", "")) == ("session", [12, 13, 14])  # unproven
    assert parse_session_pids(claim(12, "4", tag)) == ("replaced", [])
    assert parse_session_pids(claim(12, "5", "r/n/20260101000001/engine")) == ("replaced", [])
    assert parse_session_pids(claim(15, "8", "")) == ("zombie", [15])
    assert parse_session_pids(claim(16, "8", tag)) == ("gone", [])
    assert parse_session_pids("") == ("gone", [])
    assert parse_pids("12\n1\n0\n12\nabc 40") == [12, 40]


def test_python_dirs_and_stack_command() -> None:
    procs = [
        Proc(1, 0, "S", 0, 0, 1, 0, "", "python3", "/venv/bin/python3 -m vllm"),
        Proc(2, 1, "S", 0, 0, 1, 0, "", "sh", "/bin/sh -c x"),
        Proc(3, 1, "S", 0, 0, 1, 0, "", "VLLM::Worker", "VLLM::Worker_TP0"),
        Proc(4, 1, "S", 0, 0, 1, 0, "", "python", "/venv/bin/python3.12 x"),
    ]
    assert python_dirs(procs) == ["/venv/bin"]
    argv = stacks_command([1, 4], ["/venv/bin", "/opt/bin"])
    assert argv[4:] == ["/venv/bin:/opt/bin", "20", str(1 << 20), "1", "4"]
    assert stacks_timeout([1, 4]) == 110.0 and stacks_timeout(list(range(50))) == 300.0


# --------------------------------------------------------------------------- on this machine

# A session like the one deskside starts: a shell leader, a Python child with two extra
# threads, and a child the leader stops (state T).
ENGINE_SH = """
python3 -c 'import threading, time
[threading.Thread(target=time.sleep, args=(300,), daemon=True).start() for _ in range(2)]
time.sleep(300)' &
sleep 300 &
s=$!
# stop it once it runs `sleep` (a stop right after the fork would catch the shell's copy)
i=0; while [ "$(cat /proc/$s/comm)" != sleep ] && [ $i -lt 500 ]; do i=$((i+1)); done
kill -STOP $s
echo started
wait
"""


@pytest.fixture
def engine() -> Iterator[tuple[int, int, str]]:
    tag = "diag/node0/20260101000000/engine"
    proc = subprocess.Popen(
        ["sh", "-c", ENGINE_SH],
        env={**os.environ, RUN_TAG: tag},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"started\n"
        start = parse_proc_start(LocalTransport().run(proc_start(proc.pid)).stdout)
        assert start is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the Python child has started its threads
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            if any(len(os.listdir(f"/proc/{c}/task")) == 3 for c in children):
                break
            time.sleep(0.05)
        yield proc.pid, start, tag
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_commands_read_a_real_session(engine: tuple[int, int, str]) -> None:
    pid, start, tag = engine
    t = LocalTransport()
    kind, pids = parse_session_pids(t.run(session_pids_command(pid, start, tag)).stdout)
    assert kind == "session" and pid in pids and len(pids) == 3
    # another start time or another tag: not the engine deskside started
    assert parse_session_pids(t.run(session_pids_command(pid, start + 1, tag)).stdout)[0] == (
        "replaced"
    )
    other = "diag/node0/20260101000001/engine"
    assert parse_session_pids(t.run(session_pids_command(pid, start, other)).stdout)[0] == (
        "replaced"
    )

    tree = parse_tree(t.run(tree_command([pid]), timeout=60).stdout)  # descendants found
    assert not tree.problems and sorted(tree.pids) == sorted(pids)
    # the stopped child may not have exec'd `sleep` yet when stopped: known by its state
    assert [p.state for p in tree.procs if p.ppid == pid].count("T") == 1
    python = next(p for p in tree.procs if p.name == "python3")
    assert python.threads == 3 and len(python.tasks) == 3
    assert all(x.state == "S" for x in python.tasks) and "import threading" in python.command
    assert tree.procs[0].pid == pid and tree.procs[0].start_ticks == start

    stacks = t.run(stacks_command(tree.pids, python_dirs(tree.procs)), timeout=120).stdout
    assert stacks.startswith("py-spy: ")
    for p in tree.procs:
        assert f"=== process {p.pid} ({p.name})" in stacks
        for task in p.tasks:
            assert f"--- thread {task.tid} ({task.name}) state {task.state} " in stacks
    if os.geteuid() == 0:
        assert "[<0>]" in stacks or "(kernel stack not readable)" in stacks

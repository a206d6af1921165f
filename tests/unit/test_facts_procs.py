"""The process table: /proc/PID/stat parsed whatever the command name holds, a recorded
table of hostile processes read right (a command name or line cannot forge another
process's lines or a run tag), junk and cut-short tables refused or skipped, the run tag's
rule (a title that hid the environment counts through the parent in the session), and the
table read live on this machine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from deskside.facts.base import FactError, Unread, gather
from deskside.facts.procs import (
    MAX_ARGS,
    PROCESSES,
    ProcessTable,
    computes,
    engine_family,
    parse_environ,
    parse_stat,
    parse_table,
    split_table,
)
from deskside.facts.threads import THREADS
from deskside.transport.local import LocalTransport

from .hostile_procs import FORGED_TITLE, ODD_COMM, TAG, hostile
from .proc_tables import P, table_text, tagged

RECORDED = Path(__file__).parent / "fixtures" / "proc" / "hostile-table.txt"
PIDS = {
    role: int(pid)
    for role, pid in (
        line.split() for line in RECORDED.with_suffix(".pids").read_text().splitlines()
    )
}


# the hostile session's processes that carry its tag (see hostile_procs.py)
CARRIED = {"leader", "odd", "forger", "titled", "reaper", "bigenv", "badbytes", "manyargs"}


def _stat(comm: str, state: str = "S", start: int = 512377) -> str:
    return f"2817 ({comm}) {state} 1 1 1 0 -1 4194560 1 0 17 0 3 9 0 0 20 0 42 0 {start} 0 7"


# --------------------------------------------------------------------------- /proc/PID/stat


def test_parse_stat_with_odd_command_names() -> None:
    for comm in ("vllm (x) y", "a) (b\nc) d", ") ", "((", ""):
        st = parse_stat(_stat(comm))
        assert st is not None, comm
        assert (st.pid, st.comm, st.state, st.start_ticks) == (2817, comm, "S", 512377)
        assert (st.ppid, st.session, st.cpu_ticks, st.threads, st.rss_pages) == (1, 1, 12, 42, 7)


@pytest.mark.parametrize(
    "text",
    [
        "garbage",
        "",
        "2817 (x) S 1 1 1",  # cut short
        _stat("x").rsplit(" ", 3)[0],  # the fields up to the start time only
        _stat("x").replace(" 512377 ", " 51x377 "),  # a start time that is no number
        _stat("x").replace("2817 (", "28a7 ("),  # a pid that is no number
        _stat("x", state="SS"),  # no state letter
        "2817 x) S 1 1 1 0 -1 4194560 1 0 17 0 3 9 0 0 20 0 42 0 1 0 7",  # no opening
    ],
)
def test_parse_stat_refuses_junk(text: str) -> None:
    assert parse_stat(text) is None


def test_parse_environ() -> None:
    env = parse_environ(b"A=1\0B=x=y\0\0junk\0=empty\0C=\xff\0")
    assert env == {"A": "1", "B": "x=y", "C": "\ufffd"}


# --------------------------------------------------------------------------- a recorded table


def test_the_recorded_hostile_table() -> None:
    """Recorded in a PID namespace of its own (`python -m tests.unit.hostile_procs OUT`):
    only the hostile session and the recorder show."""
    table = parse_table(RECORDED.read_text())
    sid = PIDS["leader"]
    assert table.junk == 0 and table.clk_tck == 100 and table.uptime
    leader = table.processes[sid]
    assert leader.session == sid and leader.run_tags == (TAG,) and leader.environ == "read"
    odd = table.processes[PIDS["odd"]]
    assert odd.comm == ODD_COMM and odd.state == "S" and odd.ppid == sid
    assert odd.argv[-1] == ODD_COMM  # an argument with a newline, whole
    forger = table.processes[PIDS["forger"]]
    assert forger.argv == (FORGED_TITLE,) and forger.comm == FORGED_TITLE[:15]
    assert forger.environ == "hidden" and forger.run_tags == ()
    assert table.processes[1].run_tags == ()  # the forged lines named pid 1: not read as its
    assert table.processes[1].start_ticks != 0  # pid 1's own stat, not the forged one
    titled = table.processes[PIDS["titled"]]
    assert titled.argv == ("VLLM::Worker_TP1",) and titled.environ == "hidden"
    assert titled.family == "vLLM"
    assert table.processes[PIDS["bigenv"]].run_tags == (TAG,)  # after 1.2 MB of variables
    assert table.processes[PIDS["longtag"]].run_tags == ()  # 1000 bytes: not a tag
    assert table.processes[PIDS["untagged"]].environ == "read"
    assert table.processes[PIDS["oddenv"]].environ == "read"  # starts with a byte past ASCII
    bad = table.processes[PIDS["badbytes"]]
    assert bad.argv[-1] == "tab\there??"  # bytes outside printable ASCII shown as `?`
    assert len(table.processes[PIDS["manyargs"]].argv) == MAX_ARGS
    zombie = table.processes[PIDS["zombie"]]
    assert zombie.gone and zombie.argv == () and zombie.ppid == PIDS["reaper"]
    # the run tag's rule over the session
    carried = {role for role, pid in PIDS.items() if table.carries(pid, TAG, sid)}
    assert carried == CARRIED
    # the members: those, and the `sleep` the two tagged shells run (zombies are none)
    shells = (PIDS["badbytes"], PIDS["manyargs"])
    sleeps = {p.pid for p in table.processes.values() if p.ppid in shells}
    assert len(sleeps) == 2
    assert set(table.members(sid, TAG)) == {PIDS[r] for r in carried} | sleeps


def test_a_cut_short_or_foreign_table_is_refused() -> None:
    text = RECORDED.read_text()
    for cut in (text[: len(text) // 2], text[: text.index("== nul ==")], text[:-1]):
        with pytest.raises(FactError, match="cut short"):
            parse_table(cut)
    with pytest.raises(FactError, match="not a process table"):
        parse_table("alive=1 size=0\n")
    with pytest.raises(FactError, match="not a process table"):
        parse_table("")
    assert isinstance(PROCESSES.read(LocalTransport().run(["sh", "-c", "echo junk"])), Unread)


def test_junk_lines_are_skipped_and_counted() -> None:
    good = table_text([P(10), tagged(11, TAG, ppid=10, session=10)])
    junk = "\n".join(
        [
            "no colon at all",
            "12/unknown:x",
            "x/stat:12 (a) S 1",
            "13/stat:13 (a) S 1 1",  # too few fields
            "14/stat:99 (a) S " + " ".join(["1"] * 30),  # another pid's line in 14's file
        ]
    )
    table = parse_table(good.replace("== nul ==", junk + "\n== nul =="))
    assert sorted(table.processes) == [10, 11] and table.junk == 5
    assert table.processes[11].run_tags == (TAG,)


def test_what_follows_the_table_is_handed_back() -> None:
    table, rest = split_table(table_text([P(10)]) + "size=3\nabc")
    assert list(table.processes) == [10] and rest == "size=3\nabc"


# --------------------------------------------------------------------------- the run tag's rule


def test_a_hidden_environment_counts_through_its_parent_in_the_session() -> None:
    hidden = b"\0\0\0"
    table = parse_table(
        table_text(
            [
                tagged(10, TAG),
                P(11, ppid=10, session=10, environ=hidden),  # a rank titled over its env
                P(12, ppid=11, session=10, environ=hidden),  # its child, titled too
                P(13, ppid=10, session=10),  # reads without the tag
                P(14, ppid=13, session=10, environ=hidden),  # under an untagged parent
                P(15, ppid=10, session=15, environ=hidden),  # left the session
                P(16, ppid=10, session=10, environ=None),  # unreadable
                P(17, ppid=10, session=10, environ=b""),  # empty: hidden
            ]
        )
    )
    assert [p for p in range(10, 18) if table.carries(p, TAG, 10)] == [10, 11, 12, 17]
    assert not table.carries(10, "other/node0/20260101000000/engine", 10)
    assert table.members(10, TAG) == [10, 11, 12, 17]


def test_a_loop_of_hidden_parents_ends() -> None:
    table = parse_table(
        table_text(
            [P(20, ppid=21, session=20, environ=b"\0"), P(21, ppid=20, session=20, environ=b"\0")]
        )
    )
    assert not table.carries(20, TAG, 20)


# --------------------------------------------------------------------------- engine families


def test_engine_family_and_titles() -> None:
    assert engine_family(("python3", "-u", "-m", "vllm.entrypoints.openai.api_server")) == "vLLM"
    assert engine_family(("python3", "/usr/local/bin/vllm", "serve")) == "vLLM"
    assert engine_family(("VLLM::EngineCore",)) == "vLLM"
    assert engine_family(("python -m sglang.launch_server --model x",)) == "SGLang"
    assert engine_family(("python", "-m", "deskside.engine.cpu")) == "deskside engine"
    assert engine_family(("/opt/llama.cpp/llama-server",)) == "llama.cpp"
    assert engine_family(("python", "-m", "pytest", "vllm")) is None
    assert engine_family(("bash", "-c", "vllm serve")) is None
    assert engine_family(()) is None
    assert computes("VLLM::Worker_TP0") and computes("VLLM::EngineCore")
    assert not computes("python -m vllm.entrypoints.openai.api_server") and not computes(None)


# --------------------------------------------------------------------------- live


def test_the_table_of_this_machine_reads_the_hostile_session() -> None:
    with hostile() as h:
        got = gather(LocalTransport(), PROCESSES, THREADS)
        table = got.get(PROCESSES)
        assert isinstance(table, ProcessTable)
        odd = table.processes[h.pids["odd"]]
        assert odd.comm == ODD_COMM and odd.session == h.sid
        truth = Path(f"/proc/{h.pids['odd']}/stat").read_text()
        assert odd.start_ticks == int(truth.rpartition(")")[2].split()[19])
        assert table.processes[h.pids["forger"]].argv == (FORGED_TITLE,)
        shells = (h.pids["badbytes"], h.pids["manyargs"])
        sleeps = {p.pid for p in table.processes.values() if p.ppid in shells}
        assert set(table.members(h.sid, TAG)) == {h.pids[r] for r in CARRIED} | sleeps
        me = table.processes[os.getpid()]
        assert me.rss_bytes > 0 and me.threads >= 1
        threads = got.get(THREADS)
        assert [t.tid for t in threads.tasks[h.pids["odd"]]] == [h.pids["odd"]]
        assert threads.tasks[h.pids["odd"]][0].comm == ODD_COMM


def test_the_fake_tables_read_as_the_real_one() -> None:
    """tests/unit/proc_tables.py writes what the node prints: a process of this machine,
    described and written by it, parses to the same Process as the real table's."""
    child = subprocess.Popen(["sleep", "60"], env={"PATH": os.environ["PATH"], "DESKSIDE_RUN": TAG})
    try:
        table = PROCESSES.read(LocalTransport().run(PROCESSES.argv()))
        assert isinstance(table, ProcessTable)
        real = table.processes[child.pid]
        environ = Path(f"/proc/{child.pid}/environ").read_bytes()
        cgroups = tuple(Path(f"/proc/{child.pid}/cgroup").read_text().splitlines())
        described = P(
            child.pid,
            ppid=real.ppid,
            start=real.start_ticks,
            comm=real.comm,
            session=real.session,
            utime=real.cpu_ticks,
            threads=real.threads,
            rss_pages=real.rss_bytes // table.page_size,
            argv=("sleep", "60"),
            environ=environ,
            cgroups=cgroups,
        )
        fake = parse_table(table_text([described], page=table.page_size)).processes[child.pid]
        assert fake == real
    finally:
        child.kill()
        child.wait()

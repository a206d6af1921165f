"""The node-side commands run for real on this machine (LocalTransport): session stop with
SIGKILL escalation, liveness + log polling, session stats, process identity (pid + start
time: a reused pid is never signalled), the atomic `current` switch; and the pure parts:
pruning, and the SSH transport's command lines
(run by sh to prove the quoting)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deskside.deploy import releases as rel
from deskside.facts.procs import RUN_TAG
from deskside.identity import Claim, Unproven, stop_command
from deskside.layout import NodeLayout
from deskside.records.node import NodeState
from deskside.runtime import node_sh
from deskside.runtime.control import Control
from deskside.transport.base import Result
from deskside.transport.local import LocalTransport
from deskside.transport.ssh import shell_command, spawn_command

from .. import procs
from ..monitor_stub import node_state

LOCAL = LocalTransport()


TAG = "r/n/1/engine"


def _state(pid: int, start: int | None = None, tag: str | None = None) -> NodeState:
    return node_state("r", "n", pid=pid, pid_start=start, run_tag=tag)


CONTROL = Control("process", "native", NodeLayout.at("/srv/r/n", "r"))


def _poll(
    pid: int, log: str, offset: int, start: int | None = None, tag: str | None = None
) -> tuple[bool, int, bytes]:
    """(alive, log size, new bytes): the engine's poll, on this machine."""
    control = Control("process", "native", NodeLayout.at(log.rsplit("/", 1)[0], "r"))
    return control.poll(LOCAL, _state(pid, start, tag).model_copy(update={"log": log}), offset)


def _stats(pid: int, start: int | None = None, tag: str | None = None) -> tuple[int, int]:
    return CONTROL.stats(LOCAL, _state(pid, start, tag))


def _stop(pid: int, grace: float, start: int | None, tag: str = TAG) -> Result:
    return LOCAL.run(stop_command(Claim("the engine", pid, start, tag), grace))


def _start(pid: int) -> int:
    start = node_sh.parse_proc_start(LOCAL.run(node_sh.proc_start(pid)).stdout)
    assert start is not None and start > 0
    return start


def _spawn(tmp: Path, script: str) -> tuple[int, Path]:
    log = tmp / "out.log"
    pid = LOCAL.spawn(["sh", "-c", script], env={RUN_TAG: TAG}, log_path=str(log))
    return pid, log


def test_stop_session_escalates_to_sigkill(tmp_path: Path) -> None:
    # a child that ignores SIGTERM: only SIGKILL ends it
    pid, _ = _spawn(tmp_path, "trap '' TERM; sh -c \"trap '' TERM; sleep 60\" & sleep 60")
    time.sleep(0.3)
    assert len(procs.session_members(pid)) >= 2
    start = _start(pid)
    t0 = time.monotonic()
    r = _stop(pid, 1, start)
    procs.reap(pid)
    assert r.ok, r.stderr
    assert not procs.session_members(pid)
    assert 0.9 < time.monotonic() - t0 < 15
    assert _stop(pid, 1, start).ok  # nothing left: still fine


def test_poll_reports_liveness_and_new_log_bytes(tmp_path: Path) -> None:
    pid, log = _spawn(tmp_path, "echo one; echo two; exec sleep 60")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and log.read_bytes().count(b"\n") < 2:
        time.sleep(0.05)
    start = _start(pid)
    alive, size, chunk = _poll(pid, str(log), 0, start, TAG)
    assert alive and size == 8 and chunk == b"one\ntwo\n"
    alive, size, chunk = _poll(pid, str(log), 4, start, TAG)
    assert alive and size == 8 and chunk == b"two\n"
    alive, size, chunk = _poll(pid, str(log), 8)  # no start, no tag: alive, unproven
    assert alive and size == 8 and chunk == b""
    processes, rss = _stats(pid, start, TAG)
    assert processes == 1 and rss > 0
    assert procs.stop_session(pid, grace=2)
    alive, _, _ = _poll(pid, str(log), 8, start, TAG)
    assert not alive
    missing = _poll(pid, str(tmp_path / "none"), 0, start, TAG)
    assert missing == (False, 0, b"")


def test_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    """The recorded start time is the process's identity: with another start time, the
    pid is someone else's (pid reuse) and is reported gone, never stopped."""
    pid, log = _spawn(tmp_path, "sleep 60 & exec sleep 60")
    time.sleep(0.2)
    start = _start(pid)
    other = start + 1
    assert _poll(pid, str(log), 0, other, TAG)[0] is False
    assert _stats(pid, other, TAG) == (0, 0)
    r = _stop(pid, 1, other)
    assert r.ok and "left alone" in r.stderr
    assert len(procs.session_members(pid)) == 2  # untouched
    assert _poll(pid, str(log), 0, start, TAG)[0]
    assert _stop(pid, 1, start).ok
    procs.reap(pid)
    assert not procs.session_members(pid)


def test_command_names_with_spaces_and_parentheses(tmp_path: Path) -> None:
    """/proc/PID/stat is split after the last ") ": a command named like "a (b) c" still
    parses (state, session, start time)."""
    script = tmp_path / "a (b) c"
    script.write_text("#!/bin/sh\nexec sleep 60\n")
    script.chmod(0o755)
    pid = LOCAL.spawn([str(script)], env={RUN_TAG: TAG}, log_path=str(tmp_path / "log"))
    time.sleep(0.2)
    start = _start(pid)
    stats = _stats(pid, start, TAG)
    assert stats[0] == 1 and stats[1] > 0
    assert _stop(pid, 1, start).ok
    procs.reap(pid)
    assert not procs.session_members(pid)


def test_a_process_that_is_not_a_session_leader_is_not_alive() -> None:
    # pid reuse: a live process that does not lead its own session is not our engine
    alive, _, _ = _poll(os.getpid(), "/dev/null", 0)
    assert alive == (os.getsid(0) == os.getpid())


def test_switch_current_is_a_relative_link_replaced_by_rename(tmp_path: Path) -> None:
    paths = NodeLayout.at(str(tmp_path / "r" / "n"), "n")
    for rid in ("20260101T000000Z-aaaaaaaa", "20260102T000000Z-bbbbbbbb"):
        (tmp_path / "r" / "n" / "releases" / rid).mkdir(parents=True)
        (tmp_path / "r" / "n" / "releases" / rid / "id").write_text(rid)
    first, second = sorted(os.listdir(paths.releases))
    assert LOCAL.run(rel.switch_current(paths, first)).ok
    assert os.readlink(paths.current) == f"releases/{first}"
    assert LOCAL.run(rel.switch_current(paths, second)).ok
    assert Path(paths.current, "id").read_text() == second
    assert rel.parse_current(LOCAL.run(rel.read_current(paths)).stdout) == second
    assert sorted(os.listdir(paths.recipe_dir)) == ["current", "releases"]  # no temp link
    assert LOCAL.run(rel.remove_current(paths)).ok and not os.path.lexists(paths.current)
    assert rel.parse_current("") is None and rel.parse_current("elsewhere/x") is None


def test_releases_to_prune_keeps_the_newest_and_the_protected() -> None:
    ids = [f"2026010{d}T000000Z-0000000{d}" for d in range(1, 8)]
    listing = "\n".join([*ids, ".partial-x", "junk"])
    assert rel.releases_to_prune(listing, 3, {ids[0]}) == ids[1:4]
    assert rel.releases_to_prune(listing, 10, set()) == []


def test_ssh_command_lines_are_inert_under_sh(tmp_path: Path) -> None:
    nasty = "a 'b' \"c\" $(touch PWNED) `touch PWNED` ${HOME} ; * ~ \\"
    line = shell_command(["printf", "%s|", nasty, "x"], env={"V": nasty}, cwd=str(tmp_path))
    out = subprocess.run(["sh", "-c", line], capture_output=True, text=True, cwd="/")
    assert out.stdout == f"{nasty}|x|" and not (tmp_path / "PWNED").exists()
    log = tmp_path / "logs dir" / "e.log"
    line = spawn_command(
        ["sh", "-c", 'echo "$V"; exec sleep 30'], env={"V": nasty}, log_path=str(log), cwd="/"
    )
    out = subprocess.run(["sh", "-c", line], capture_output=True, text=True)
    pid = int(out.stdout.strip())
    try:
        assert os.getsid(pid) == pid  # already a session leader when the pid is printed
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not log.exists():
            time.sleep(0.05)
        time.sleep(0.2)
        assert log.read_text() == nasty + "\n"
    finally:
        assert procs.stop_session(pid, grace=2)


def test_a_rank_whose_title_hid_the_tag_is_signalled_with_its_session(tmp_path: Path) -> None:
    """vLLM's ranks set their process title over their environment (setproctitle: all NUL
    bytes), so their tag cannot be read: they count as the run's through their parent in
    the session. A stopped one is continued, so it takes its SIGTERM. A member with a
    readable environment without the tag is still left alone."""
    titled = (
        f"{sys.executable} -c 'import setproctitle, time; "
        'setproctitle.setproctitle("VLLM::Worker_TP1"); time.sleep(60)\' & '
        "env -u DESKSIDE_RUN sleep 60 & exec sleep 60"
    )
    log = tmp_path / "log"
    tag = "r/n/1/engine"
    pid = LOCAL.spawn(["sh", "-c", titled], env={"DESKSIDE_RUN": tag}, log_path=str(log))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        names = [p.cmdline for p in procs.session_members(pid)]
        if any(n.startswith("VLLM::Worker_TP1") for n in names):
            break
        time.sleep(0.1)
    members = procs.session_members(pid)
    rank = next(p.pid for p in members if p.cmdline.startswith("VLLM::Worker_TP1"))
    untagged = next(p.pid for p in members if p.pid not in (pid, rank))
    assert not Path(f"/proc/{rank}/environ").read_bytes().strip(b"\0")  # the title's doing
    start = _start(pid)
    try:
        os.kill(rank, signal.SIGSTOP)
        assert _stats(pid, start, tag)[0] == 2  # the leader and the rank
        assert _stop(pid, 5, start, tag).ok
        procs.reap(pid)
        assert [p.pid for p in procs.session_members(pid)] == [untagged]
    finally:
        for p in procs.session_members(pid):
            os.kill(p.pid, 9)  # the test's own processes
        procs.reap(pid)


# A child that writes NUL bytes over the start of its own environment, up to the end of the
# run's tag, and keeps the rest: what vLLM's rank processes show after their title change.
CLOBBER = """
import os, sys, time
stat = open("/proc/self/stat").read()
fields = stat[stat.rindex(")") + 2 :].split()
env_start, env_end = int(fields[47]), int(fields[48])  # proc(5) fields 50 and 51
env = open("/proc/self/environ", "rb").read()
cut = env.index(b"DESKSIDE_RUN=")
cut = env.index(b"\\0", cut) + 1
with open("/proc/self/mem", "r+b") as mem:
    mem.seek(env_start)
    mem.write(b"\\0" * cut)
print("clobbered", cut, "of", len(env), flush=True)
time.sleep(60)
"""


def test_a_rank_whose_title_clobbered_the_start_of_its_environment(tmp_path: Path) -> None:
    """The tag overwritten, the rest of the environment still readable (as seen on real
    vLLM ranks): the rank still counts through its parent, and a stop takes it."""
    script = tmp_path / "clobber.py"
    script.write_text(CLOBBER)
    log = tmp_path / "log"
    tag = "r/n/1/engine"
    argv = ["sh", "-c", f"{sys.executable} {script} & exec sleep 60"]
    pid = LOCAL.spawn(argv, env={"DESKSIDE_RUN": tag, "AFTER": "kept"}, log_path=str(log))
    deadline = time.monotonic() + 20
    while "clobbered" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    rank = next(p.pid for p in procs.session_members(pid) if p.pid != pid)
    env = Path(f"/proc/{rank}/environ").read_bytes()
    assert env[:1] == b"\0" and b"DESKSIDE_RUN" not in env and env.strip(b"\0")
    start = _start(pid)
    try:
        os.kill(rank, signal.SIGSTOP)
        assert _stats(pid, start, tag)[0] == 2
        assert _stop(pid, 5, start, tag).ok
        procs.reap(pid)
        assert procs.session_members(pid) == []
    finally:
        for p in procs.session_members(pid):
            os.kill(p.pid, 9)  # the test's own processes
        procs.reap(pid)


def test_only_processes_carrying_the_run_tag_are_signalled(tmp_path: Path) -> None:
    """A process of the recorded session without the run's DESKSIDE_RUN tag (something the
    engine did not start, or a foreign process named by a forged state) is never signalled."""
    script = "env -u DESKSIDE_RUN sleep 60 & exec sleep 60"
    log = tmp_path / "log"
    pid = LOCAL.spawn(["sh", "-c", script], env={"DESKSIDE_RUN": "r/n/1/engine"}, log_path=str(log))
    time.sleep(0.3)
    members = procs.session_members(pid)
    assert len(members) == 2
    untagged = next(p.pid for p in members if p.pid != pid)
    start = _start(pid)
    try:
        assert _stats(pid, start)[0] == 2  # no tag recorded: every member counts (unproven)
        assert _stats(pid, start, "r/n/1/engine")[0] == 1
        # no tag recorded: nothing is signalled at all (refused before the node, and there)
        with pytest.raises(Unproven, match="no run tag"):
            stop_command(Claim("the engine", pid, start, None), 1)
        r = LOCAL.run(node_sh.stop_session(pid, 1, start, ""))
        assert r.rc == 2 and "no run tag" in r.stderr
        # a wrong tag: the leader is not ours, nothing is signalled
        r = _stop(pid, 1, start, "r/n/2/engine")
        assert r.ok and "left alone" in r.stderr
        assert len(procs.session_members(pid)) == 2
        # the right tag: the leader goes, the untagged member stays
        assert _stop(pid, 1, start, "r/n/1/engine").ok
        procs.reap(pid)
        assert [p.pid for p in procs.session_members(pid)] == [untagged]
    finally:
        os.kill(untagged, 9)  # the test's own process
        procs.reap(pid)


@pytest.mark.parametrize("pid", ["0", "1", "-1", "", "x"])
def test_scripts_refuse_pids_that_select_groups_or_init(pid: str) -> None:
    r = LOCAL.run(["sh", "-c", node_sh.STOP_SESSION_SH, "sh", pid, "1", "100", TAG])
    assert r.rc == 2 and "refusing" in r.stderr
    r = LOCAL.run(["sh", "-c", node_sh.STOP_PID_SH, "sh", pid, "100"])
    assert r.rc == 2 and "refusing" in r.stderr


def test_a_state_naming_pid_1_does_not_load() -> None:
    from pydantic import ValidationError

    from deskside.records.node import NodeState

    base = {"recipe": "r", "node": "n", "role": "head", "node_rank": 0, "release": None}
    base |= {"control": "process", "started_at": "2026-01-01T00:00:00+00:00"}
    for bad in (0, 1, -5):
        with pytest.raises(ValidationError):
            NodeState.model_validate({**base, "pid": bad})

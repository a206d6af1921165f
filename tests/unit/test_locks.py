"""`deskside.locks.hold`: one holder at a time, the second one told who holds it. Real
second processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from deskside import locks
from deskside.errors import UsageError
from deskside.locks import Busy, hold
from deskside.render.bundle import BUSY_LOCK, Bundle

ROOT = Path(__file__).resolve().parents[2]

HOLDER = """
import sys
from pathlib import Path
from deskside.locks import hold
with hold(Path(sys.argv[1]), "the thing"):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes stdin
print("released", flush=True)
"""


@pytest.fixture
def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NO_COLOR": "1"}


def holder(lock: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "held\n"
    return proc


@pytest.fixture
def held(tmp_path: Path, env: dict[str, str]) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    out = tmp_path / "out"
    out.mkdir()
    proc = holder(out / BUSY_LOCK, env)
    yield out, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_a_second_holder_gets_busy_with_the_holders_pid(
    held: tuple[Path, subprocess.Popen[str]],
) -> None:
    out, proc = held
    with pytest.raises(Busy) as exc, hold(out / BUSY_LOCK, "the thing"):
        pytest.fail("held twice")
    assert exc.value.pid == proc.pid and exc.value.exit_code == 2
    assert f"pid {proc.pid}" in exc.value.message and f"kill {proc.pid}" in (exc.value.hint or "")
    assert (out / BUSY_LOCK).read_text() == f"{proc.pid}\n"


def test_a_second_bundle_writer_gets_busy_and_writes_nothing(
    held: tuple[Path, subprocess.Popen[str]],
) -> None:
    out, proc = held
    bundle = Bundle()
    bundle.add("ai1/launch.sh", b"#!/bin/sh\n", 0o755)
    with pytest.raises(Busy, match=f"bundle folder {out} is busy: deskside pid {proc.pid}"):
        bundle.write(out)
    assert sorted(os.listdir(out)) == [BUSY_LOCK]


def test_a_second_render_process_gets_busy(
    held: tuple[Path, subprocess.Popen[str]], tmp_path: Path, env: dict[str, str]
) -> None:
    """`deskside render` into a bundle folder another deskside is writing: exit 2, the
    holder's pid named."""
    out, proc = held
    recipe = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "deskside.cli", "render", str(recipe), "--out", str(out)],
        capture_output=True,
        text=True,
        env={**env, "DESKSIDE_HOME": str(tmp_path / "home")},
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"deskside pid {proc.pid}" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(os.listdir(out)) == [BUSY_LOCK]


def test_released_on_exit_and_the_file_removed(
    held: tuple[Path, subprocess.Popen[str]],
) -> None:
    out, proc = held
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    assert proc.stdout.readline() == "released\n"
    proc.wait()
    assert not (out / BUSY_LOCK).exists()
    with hold(out / BUSY_LOCK, "the thing"):
        assert (out / BUSY_LOCK).read_text() == f"{os.getpid()}\n"
    assert not (out / BUSY_LOCK).exists()


def test_a_killed_holders_lock_is_taken_over(
    held: tuple[Path, subprocess.Popen[str]],
) -> None:
    out, proc = held
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (out / BUSY_LOCK).exists()  # left behind: the kernel let go of the lock
    with hold(out / BUSY_LOCK, "the thing"):
        assert (out / BUSY_LOCK).read_text() == f"{os.getpid()}\n"


def test_held_once_per_process_too(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    with hold(lock, "the thing"), pytest.raises(Busy, match=f"pid {os.getpid()}"):
        locks.acquire(lock, "the thing")


def test_a_lock_file_that_is_a_link_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "x.lock").symlink_to(victim)
    with pytest.raises(UsageError, match="is a link"), hold(tmp_path / "x.lock", "the thing"):
        pass
    assert victim.read_text() == "keep\n"

"""One deskside at a time on a run: while a process holds the run's lock, a second
deskside (a real process) running `up`, `down` or `down --forget` of that run gets a
"busy" error naming the holder's pid (exit 2), and changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deskside.records.names import run_lock

from ..cli_process import deskside as run_deskside

ROOT = Path(__file__).parents[2]


def deskside(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_deskside(*args, home=home, timeout=60)


@pytest.mark.parametrize(
    "args",
    [
        ("down", "--recipe", "local-tiny", "--json"),
        ("down", "--forget", "--recipe", "local-tiny", "--json"),
        ("up", "local-tiny", "--dry-run", "--json"),
    ],
    ids=["down", "forget", "up"],
)
def test_a_second_deskside_on_a_run_is_told_busy(
    args: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("DESKSIDE_HOME", str(home))
    record = home / "runs" / "local-tiny" / "run.json"
    record.parent.mkdir(parents=True)
    record.write_text("{}")  # whatever is there, the busy run is not touched
    with run_lock("local-tiny"):
        done = deskside(home, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "busy" in out and f"pid {os.getpid()}" in out and "Traceback" not in out
    assert record.read_text() == "{}"
    # released: the lock is gone with its holder, and the next deskside gets in
    assert not list((home / "locks").iterdir())


def test_the_lock_of_a_dead_holder_is_taken_over(tmp_path: Path) -> None:
    home = tmp_path / "home"
    code = (
        "import os\n"
        "from deskside.records.names import run_lock\n"
        "lock = run_lock('x')\n"
        "lock.__enter__()\n"
        "os._exit(0)  # dies holding it, the lock file left behind\n"
    )
    env = {**os.environ, "DESKSIDE_HOME": str(home)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    assert (home / "locks" / "run-x.lock").exists()
    done = deskside(home, "down", "--forget", "--recipe", "x", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["recipe"] == "x"


def test_a_run_name_cannot_leave_the_locks_folder(tmp_path: Path) -> None:
    done = deskside(tmp_path / "home", "down", "--recipe", "../../etc", "--json")
    assert done.returncode == 2 and "not a recipe name" in done.stdout + done.stderr
    assert not (tmp_path / "etc").exists()

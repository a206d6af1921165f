"""What a user sees while a long command runs when stdout/stderr is not a terminal (a CI
log, `| tee`, a file): one plain line per step with the seconds since the start; and the
embedded recipe starting without an uninstalled proxy (with a note), while a recipe file
that enables the proxy refuses."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from deskside.cli import common
from deskside.home import embedded_recipes

ROOT = Path(__file__).parents[2]


def test_steps_print_one_plain_line_per_step_off_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert not common.err.is_terminal  # pytest captures stderr
    with common.steps("starting") as say:
        say("node1: spawn")
        say("node1: spawn")  # the same step twice is one line
        say("head: \x1b[31mready")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3, lines
    assert all(re.fullmatch(r"\[ +\d+ s\] .+", line) for line in lines), lines
    assert lines[0].endswith("] starting") and lines[1].endswith("] node1: spawn")
    assert "\x1b" not in lines[2] and lines[2].endswith("head: \\x1b[31mready")


def _up_dry_run(arg: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "DESKSIDE_HOME": str(home),
        "DESKSIDE_LITELLM": str(home / "no-litellm-here"),
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(
        [sys.executable, "-m", "deskside.cli", "up", arg, "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )


def test_embedded_recipe_starts_without_the_proxy_with_a_note(tmp_path: Path) -> None:
    done = _up_dry_run("local-tiny", tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout + done.stderr
    assert "proxy not started: it is not installed" in text
    assert "deskside proxy install" in text
    # the steps show in the log, one line each
    assert re.search(r"^\[ +\d+ s\] preflight$", done.stderr, re.M), done.stderr


def test_a_recipe_file_that_enables_the_proxy_refuses_without_it(tmp_path: Path) -> None:
    # the same recipe as a file beside the embedded one's tiny model (made by the first up)
    assert _up_dry_run("local-tiny", tmp_path).returncode == 0
    recipe = tmp_path / "mine.yaml"
    recipe.write_text(embedded_recipes()["local-tiny"])
    done = _up_dry_run(str(recipe), tmp_path)
    assert done.returncode != 0
    assert "proxy is enabled but not installed here" in done.stderr
    assert "Traceback" not in done.stderr

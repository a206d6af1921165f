"""Text deskside did not write (recipe names, paths, error messages, hints, log lines)
prints literally: Rich markup stays those characters, `:name:` codes are no emoji, and a
control character prints as its escape (`\\x1b`), never reaching the terminal. Ctrl-C
exits 130 with "interrupted" and no traceback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import asyncssh
import pytest
import typer
from typer.testing import CliRunner

from deskside.cli.app import app
from deskside.cli.common import fail
from deskside.errors import DesksideError, Location
from deskside.terminal import literal, shown

from ..deploy_cases import ensure_tiny_model, loopback_ssh_recipe, ssh_recipe_data, write_recipe

runner = CliRunner()
HOSTILE = "[bold]x[/] :100: [link=http://e.example]l[/link] \x1b[31mred\x07 \u202eevil \\"


def test_shown_escapes_markup_and_writes_out_control_characters() -> None:
    assert literal("a\x1b[2Jb\x00\x7f\x9b") == "a\\x1b[2Jb\\x00\\x7f\\x9b"
    assert literal("two\nlines\tand\r") == "two\nlines\tand\\x0d"
    assert literal("two\nlines\t", multiline=False) == "two\\nlines\\t"
    assert literal("\u202eevil\u2066") == "\\u202eevil\\u2066"
    assert shown("[bold]x[/]") == "\\[bold]x\\[/]"
    assert literal(3) == "3" and shown(None) == "None"


def test_fail_prints_a_hostile_message_location_and_hint_literally(
    capsys: pytest.CaptureFixture[str],
) -> None:
    error = DesksideError(HOSTILE, hint=f"hint {HOSTILE}", location=Location(f"/p/{HOSTILE}"))
    with pytest.raises(typer.Exit) as done:
        fail(error)
    assert done.value.exit_code == error.exit_code
    printed = capsys.readouterr().err
    assert "\x1b" not in printed and "\x07" not in printed and "\u202e" not in printed
    assert printed.count("[bold]x[/] :100: [link=http://e.example]l[/link]") == 3
    assert printed.count("\\x1b[31mred\\x07 \\u202eevil") == 3
    assert "\N{HUNDRED POINTS SYMBOL}" not in printed


def test_a_hostile_recipe_path_prints_literally(tmp_path: Path) -> None:
    path = str(tmp_path / f"{HOSTILE}.yaml")
    result = runner.invoke(app, ["validate", path])
    assert result.exit_code == 2
    assert "[bold]x[/] :100:" in result.output
    assert "\\x1b[31mred\\x07" in result.output
    assert "\x1b" not in result.output and "\N{HUNDRED POINTS SYMBOL}" not in result.output


def test_a_hostile_recipe_name_prints_literally(tmp_path: Path) -> None:
    data = ssh_recipe_data(
        addresses=("127.0.0.1", "localhost"),
        interfaces=("lo", "lo"),
        identity_file=str(tmp_path / "id"),
        root=str(tmp_path / "nodes"),
        hf_cache=str(tmp_path / "hf"),
    )
    data["name"] = "[bold]x[/]:100:"
    ensure_tiny_model(tmp_path)
    result = runner.invoke(app, ["validate", str(write_recipe(tmp_path, data))])
    assert result.exit_code == 2  # recipe names are slugs: refused, and quoted literally
    assert "'[bold]x[/]:100:' is not a slug" in result.output
    assert "\N{HUNDRED POINTS SYMBOL}" not in result.output


def _listening() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s


def test_ctrl_c_while_a_command_waits_exits_130_without_a_traceback(tmp_path: Path) -> None:
    """`up --dry-run` of an ssh: recipe whose nodes accept TCP and never answer: the SIGINT
    comes once the command is connecting (deskside is then inside the command)."""
    server = _listening()
    port = int(server.getsockname()[1])
    recipe = loopback_ssh_recipe(tmp_path, port)
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(tmp_path / "id"))
    (tmp_path / "id").chmod(0o600)
    known = tmp_path / "known_hosts"
    known.write_text("")
    env = {**os.environ, "DESKSIDE_HOME": str(tmp_path / "home")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[2] / "src"), *sys.path])
    argv = ["up", str(recipe), "--dry-run", "--known-hosts", str(known)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "deskside.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        server.settimeout(60)
        conn, _ = server.accept()  # deskside is connecting: inside `up`
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        conn.close()
    finally:
        server.close()
        if proc.poll() is None:
            proc.kill()
    text = (out + err).decode(errors="replace")
    assert proc.returncode == 130, text
    assert "interrupted" in err.decode()
    assert "Traceback" not in text and "Aborted" not in text

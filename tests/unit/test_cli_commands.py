"""The command table: `deskside --help` lists every command without importing one; each
entry resolves to a real command; every option has a long form; the node daemons' old
spellings still run, with a deprecation note."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer._click.core import Command, Context
from typer.core import TyperGroup, TyperOption
from typer.testing import CliRunner

from deskside.cli.app import COMMANDS, app
from deskside.cli.lazy import Entry, load
from deskside.cli.node import app as node_app


def _all_commands() -> list[tuple[str, Command]]:
    out: list[tuple[str, Command]] = []

    def walk(prefix: str, command: Command) -> None:
        out.append((prefix, command))
        if isinstance(command, TyperGroup):
            ctx = Context(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(f"{prefix} {name}", sub)

    for entry in COMMANDS:
        walk(f"deskside {entry.name}", load(entry))
    return out


def test_help_imports_no_command_module() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from deskside.cli.app import app\n"
        "r = CliRunner().invoke(app, ['--help'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('deskside.'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    commands = {e.target.partition(":")[0] for e in COMMANDS}
    assert not loaded & commands, sorted(loaded & commands)
    assert not any(m.startswith(("deskside.recipe", "deskside.planner")) for m in loaded)


@pytest.mark.parametrize("argv", [["status", "nothing-up"], ["plan", "local-tiny"]])
def test_status_and_plan_load_neither_ssh_nor_the_renderer(argv: list[str], tmp_path: Path) -> None:
    """What a local `status` or `plan` never uses stays unloaded (asyncssh: ssh nodes only;
    the bundle renderer with its Grafana models: a start or `render`): each costs ~0.05 to
    0.1 s of every command's start."""
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from deskside.cli.app import app\n"
        f"r = CliRunner().invoke(app, {argv!r})\n"
        "print(r.exit_code)\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "DESKSIDE_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    code_line, modules = done.stdout.strip().splitlines()[-2:]
    assert code_line == ("0" if argv[0] == "plan" else "1"), done.stdout  # nothing is up
    loaded = set(modules.split())
    unwanted = {"asyncssh", "deskside.transport.ssh", "deskside.render.assemble"}
    assert not loaded & unwanted, sorted(loaded & unwanted)
    assert not [m for m in loaded if m.startswith("grafana_foundation_sdk")]


def test_help_lists_every_visible_command_and_hides_old_spellings() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for entry in COMMANDS:
        listed = f" {entry.name} " in result.output
        assert listed != entry.hidden, entry.name


@pytest.mark.parametrize("entry", COMMANDS, ids=lambda e: e.name)
def test_every_entry_resolves_to_a_command(entry: Entry) -> None:
    command = load(entry)
    assert command.name == entry.name
    assert isinstance(command, TyperGroup) == entry.group


def test_every_option_has_a_long_form() -> None:
    missing = [
        f"{where}: {param.opts}"
        for where, command in _all_commands()
        for param in command.params
        if isinstance(param, TyperOption) and not any(o.startswith("--") for o in param.opts)
    ]
    assert missing == []


@pytest.mark.parametrize("daemon", ["exporter", "guard", "watch"])
def test_node_daemons_live_under_node_and_old_spellings_still_run(daemon: str) -> None:
    new = CliRunner().invoke(app, ["node", daemon, "--help"])
    assert new.exit_code == 0, new.output
    assert f"deskside node {daemon}" in new.output
    assert daemon in CliRunner().invoke(node_app, ["--help"]).output
    old = CliRunner().invoke(app, [daemon, "--no-such-flag"])
    assert f"deskside {daemon} is deprecated: use `deskside node {daemon}`" not in old.output
    assert old.exit_code == 2  # parsed by the same command: the unknown flag is refused
    ran = CliRunner().invoke(app, [daemon, "--help"])
    assert ran.exit_code == 0 and "--" in ran.output


@pytest.mark.parametrize("command", ["status", "down", "logs", "watch", "top", "probe", "diagnose"])
def test_every_command_on_a_run_names_it_the_same_way(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run is the first argument, optional when one run is up; with none up, every
    command says so in the same words."""
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    extra = ["--out", str(tmp_path / "b")] if command == "diagnose" else []
    named = CliRunner().invoke(app, [command, "nosuchrun", *extra])
    assert named.exit_code != 0 and "Traceback" not in named.output
    assert "nosuchrun" in named.output
    alone = CliRunner().invoke(app, [command, *extra, *(["--once"] if command == "top" else [])])
    assert alone.exit_code != 0 and "nothing is running" in alone.output.lower(), alone.output


@pytest.mark.parametrize("command", ["status", "down", "logs", "watch"])
def test_the_old_recipe_flag_still_names_the_run_with_a_note(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSIDE_HOME", str(tmp_path))
    old = CliRunner().invoke(app, [command, "--recipe", "nosuchrun"])
    new = CliRunner().invoke(app, [command, "nosuchrun"])
    assert "--recipe is deprecated" in old.output
    assert old.exit_code == new.exit_code != 0
    twice = CliRunner().invoke(app, [command, "a", "--recipe", "b"])
    assert twice.exit_code == 2 and "named twice" in twice.output

"""`deskside proxy install`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from deskside.cli.common import JsonFlag, emit_json, fail, out, steps
from deskside.errors import DesksideError
from deskside.terminal import shown

app = typer.Typer(help="The LiteLLM proxy in front of the engine.", no_args_is_help=True)


@app.command("install")
def install(
    venv: Annotated[
        Path | None,
        typer.Option(help="The virtualenv folder (default: $DESKSIDE_HOME/litellm)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Install the pinned LiteLLM proxy into a virtualenv of its own (its dependencies
    would move vLLM's). `deskside up` finds it there for runs on this machine; for
    deployed heads give its litellm program in the recipe's proxy.litellm."""
    from deskside.proxy_install import install as do_install

    try:
        with steps("installing the LiteLLM proxy", clock=False) as say:
            result = do_install(venv, say=say)
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(result)
        return
    verb = "installed" if result["installed"] else "already installed"
    out.print(f"LiteLLM {shown(result['version'])} {verb}: {shown(result['litellm'])}")

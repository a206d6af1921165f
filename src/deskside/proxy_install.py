"""`deskside proxy install`: the pinned LiteLLM proxy in a virtualenv of its own.

LiteLLM's dependencies clash with vLLM's (and it weighs ~750 MB), so it never shares
deskside's environment: `python -m venv DIR`, then `pip install litellm[proxy]==PIN`. The
default folder is $DESKSIDE_HOME/litellm, where runs on this machine look for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from deskside.errors import DesksideError
from deskside.home import deskside_home
from deskside.runtime.services import MANAGED_PROXY_DIR

LITELLM_PIN = "litellm[proxy]==1.108.5"
"""The LiteLLM proxy deskside is tested with. 1.107.x was a compromised release and is
never used."""


def default_venv() -> Path:
    return deskside_home() / MANAGED_PROXY_DIR


def installed_version(venv: Path) -> str | None:
    """The LiteLLM version in `venv`, or None when it has none."""
    python = venv / "bin" / "python"
    if not (venv / "bin" / "litellm").is_file() or not python.is_file():
        return None
    r = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return r.stdout.strip() or None if r.returncode == 0 else None


def _run(argv: list[str], what: str) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise DesksideError(
            f"{what} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-800:]}",
            hint="pip needs the package index (PyPI) or a mirror set in PIP_INDEX_URL",
        )


def install(
    venv: Path | None = None, python: str | None = None, say: Callable[[str], None] = print
) -> dict[str, object]:
    """Make `venv` (default $DESKSIDE_HOME/litellm) with the pinned LiteLLM proxy; nothing
    is done when it is there already. Returns what was found or installed."""
    venv = (venv or default_venv()).absolute()
    pin_version = LITELLM_PIN.split("==", 1)[1]
    have = installed_version(venv)
    if have == pin_version:
        return {
            "venv": str(venv),
            "litellm": str(venv / "bin" / "litellm"),
            "version": have,
            "installed": False,
        }
    if not (venv / "bin" / "python").is_file():
        say(f"creating the virtualenv {venv}")
        _run([python or sys.executable, "-m", "venv", str(venv)], f"python -m venv {venv}")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    say("upgrading pip")
    _run([*pip, "--upgrade", "pip"], "pip install --upgrade pip")
    say(f"installing {LITELLM_PIN} (a few minutes)")
    _run([*pip, LITELLM_PIN], f"pip install {LITELLM_PIN}")
    version = installed_version(venv)
    if version != pin_version:
        raise DesksideError(f"{venv} holds LiteLLM {version}, not {pin_version}")
    os.chmod(venv, 0o755)
    return {
        "venv": str(venv),
        "litellm": str(venv / "bin" / "litellm"),
        "version": version,
        "installed": True,
    }

"""`deskside` as users run it: a fresh `python -m deskside.cli` process from the checkout,
with its own DESKSIDE_HOME when given, output captured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def deskside(
    *args: str, home: Path | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if home is not None:
        env["DESKSIDE_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "deskside.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=timeout,
    )

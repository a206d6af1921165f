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

import json
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
TIME_LIMIT = 10.0  # a fresh interpreter on a loaded two-core machine; a hang is minutes
UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
MEMORY = "2GiB"  # ulimit -v of the command: a read without a cap ends in MemoryError
UNSHARE = [
    "unshare",
    "--pid",
    "--fork",
    "--mount",
    "--net",
    "--mount-proc",
    "--propagation",
    "private",
]
# what a case may ask its sandbox for (see sandbox.py)
SANDBOX_KEYS = ("setup", "servers", "foreign", "background", "keep", "gone", "canary", "settle")


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
    returncode: int | None = None  # None: no answer within three times its limit
    seconds: float = 0.0
    dead: list[str] = field(default_factory=list)  # foreign processes that died
    changed: list[str] = field(default_factory=list)  # kept paths that changed
    leaked: list[str] = field(default_factory=list)  # where the canary showed up
    remained: list[str] = field(default_factory=list)  # paths the case expects removed
    sandbox_error: str | None = None
    limit: float = TIME_LIMIT


def run_case(folder: Path, case: dict[str, Any], base: Path) -> Ran:
    """Copy the case's folder under `base`, make what git cannot hold, then run the case in
    its own sandbox (see sandbox.py) and read what the sandbox saw."""
    root = base / folder.name
    shutil.copytree(folder, root, symlinks=True)
    for rel in case.get("fill", []):
        path = root / rel
        path.write_text(path.read_text().replace("{here}", str(root)))
    for spec in case.get("make", []):
        make(root, spec)
    (base / "user").mkdir()
    (base / "tmp").mkdir()
    home = root / case["home"] if "home" in case else base / "home"
    env = {
        **os.environ,
        "DESKSIDE_HOME": str(home),
        "HOME": str(base / "user"),
        "TMPDIR": str(base / "tmp"),
        "NO_COLOR": "1",
        "COLUMNS": "200",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("DESKSIDE_DEBUG", None)
    limit = float(case.get("limit", TIME_LIMIT))
    spec = {
        "base": str(base),
        "root": str(root),
        "argv": [a.replace("{here}", str(root)) for a in case["args"]],
        "env": env,
        "stdin": case.get("stdin", ""),
        "limit": limit,
        "memory": _size(case.get("memory", MEMORY)),
        "result": str(base / "result.json"),
        "fill": case.get("fill", []),
        **{k: case[k] for k in SANDBOX_KEYS if k in case},
    }
    (base / "spec.json").write_text(json.dumps(spec))
    try:
        subprocess.run(
            [*UNSHARE, sys.executable, str(HERE / "sandbox.py"), str(base / "spec.json")],
            capture_output=True,
            timeout=limit * 3 + 30,
            check=False,
        )
        seen = json.loads((base / "result.json").read_text())
    except (subprocess.TimeoutExpired, OSError, ValueError) as exc:
        return Ran(sandbox_error=f"the sandbox did not report: {exc}")
    return Ran(
        seen["output"],
        seen["returncode"],
        seen["seconds"],
        dead=seen.get("dead", []),
        changed=seen.get("changed", []),
        leaked=seen.get("leaked", []),
        remained=seen.get("remained", []),
        sandbox_error=seen.get("sandbox_error"),
        limit=limit,
    )


def case_id(folder: Path, case: dict[str, Any]) -> str:
    return f"{folder.name}/{case['name']}"


@pytest.mark.parametrize(("folder", "case"), cases(), ids=[case_id(f, c) for f, c in cases()])
def test_hostile(folder: Path, case: dict[str, Any], tmp_path: Path) -> None:
    """One case in its sandbox; the tier runs cases on three workers (`-n 3`), each case one
    process tree, so its time is its own."""
    result = run_case(folder, case, tmp_path)
    assert result.sandbox_error is None, result.sandbox_error
    if result.returncode is None:
        pytest.fail(f"no answer within {result.limit * 3:.0f} s")
    output = result.output
    assert "Traceback" not in output, output[-2000:]
    assert result.returncode == case["exit"], output[-2000:]
    assert case["contains"].lower() in output.lower(), output[-2000:]
    assert result.seconds < result.limit, f"{result.seconds:.1f} s"
    assert not result.dead, f"foreign processes died: {result.dead}\n{output[-2000:]}"
    assert not result.changed, f"changed: {result.changed}\n{output[-2000:]}"
    assert not result.leaked, f"the canary leaked into {result.leaked}"
    assert not result.remained, f"not removed: {result.remained}\n{output[-2000:]}"

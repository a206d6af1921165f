"""`deskside doctor` on this machine, for real: a forgotten engine-like process holding
memory, an orphaned NCCL segment and a decoy segment a live process maps. doctor reports
the engine with its resident memory and the orphan with its size, never offers the decoy,
and `--fix --yes` removes the orphan only.

Everything runs in a mount namespace the test makes, with a private tmpfs over /dev/shm:
the machine's own /dev/shm (other runs' segments) is never seen, let alone touched. The
namespace dies with the test's processes, and its tmpfs with it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
ENGINE = """
import sys, time
held = b"\\1" * (100 << 20)  # written, so resident
print("ready", flush=True)
time.sleep(600)
"""
HOLD = """
import mmap, sys, time
with open(sys.argv[1], "w+b") as f:
    f.truncate(1 << 20)
    m = mmap.mmap(f.fileno(), 0)
m[:] = b"\\1" * len(m)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def private_shm() -> Iterator[list[str]]:
    """The argv prefix that runs a command in a mount namespace with its own /dev/shm."""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")):
        pytest.skip("needs root, unshare and nsenter")
    keeper = subprocess.Popen(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -t tmpfs -o size=64m,mode=1777 deskside-test-shm /dev/shm "
            "&& echo ready && exec sleep 600",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert keeper.stdout is not None and keeper.stdout.readline().strip() == "ready"
        yield ["nsenter", "--target", str(keeper.pid), "--mount", "--"]
    finally:
        keeper.kill()
        keeper.wait()


def _start(argv: list[str], **kw: object) -> subprocess.Popen[str]:
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kw)  # type: ignore[call-overload]
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def _doctor(ns: list[str], home: Path, *args: str) -> dict:  # type: ignore[type-arg]
    env = {**os.environ, "DESKSIDE_HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run(
        [*ns, sys.executable, "-m", "deskside.cli", "doctor", "local-tiny", "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert r.stdout, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def _exists(ns: list[str], path: str) -> bool:
    return subprocess.run([*ns, "test", "-e", path]).returncode == 0


def test_doctor_reports_the_engine_and_the_orphan_and_fixes_only_the_orphan(
    private_shm: list[str], tmp_path: Path
) -> None:
    ns = private_shm
    fake = tmp_path / "fake"
    server = fake / "vllm" / "entrypoints" / "openai"
    server.mkdir(parents=True)
    for d in (fake / "vllm", fake / "vllm" / "entrypoints", server):
        (d / "__init__.py").write_text("")
    (server / "api_server.py").write_text(ENGINE)
    unique = uuid.uuid4().hex[:12]
    orphan, decoy = f"/dev/shm/nccl-{unique}", f"/dev/shm/nccl-{unique}-held"
    children: list[subprocess.Popen[str]] = []
    try:
        argv = ["-m", "vllm.entrypoints.openai.api_server", "--model", "fake"]
        env = {**os.environ, "PYTHONPATH": str(fake)}
        env.pop("DESKSIDE_RUN", None)
        engine = _start([*ns, sys.executable, *argv], env=env, cwd=tmp_path)
        children.append(engine)
        children.append(_start([*ns, sys.executable, "-c", HOLD, decoy]))
        subprocess.run([*ns, "sh", "-c", f"head -c 3145728 /dev/zero > {orphan}"], check=True)

        report = _doctor(ns, tmp_path / "home")
        by_kind: dict[str, list[dict]] = {}  # type: ignore[type-arg]
        for f in report["findings"]:
            by_kind.setdefault(f["kind"], []).append(f)
        mine = [
            f for f in by_kind.get("foreign-engine", []) if f["detail"].get("pid") == engine.pid
        ]
        assert len(mine) == 1, by_kind.get("foreign-engine")
        assert mine[0]["reclaimable_bytes"] >= 100 << 20
        assert not mine[0]["fixable"] and mine[0]["fix"] == f"kill -TERM {engine.pid}"
        shm = {f["detail"]["path"]: f for f in by_kind.get("shm-orphan", [])}
        assert shm[orphan]["reclaimable_bytes"] == 3 << 20 and shm[orphan]["fixable"]
        assert decoy not in shm  # held: never offered

        fixed = _doctor(ns, tmp_path / "home", "--fix", "--yes")
        done = [f for f in fixed["findings"] if f["detail"].get("path") == orphan]
        assert done and done[0]["fixed"]
        assert not _exists(ns, orphan)
        assert _exists(ns, decoy)
        assert engine.poll() is None  # the engine was reported, never signalled
    finally:
        for p in children:
            p.kill()
            p.wait()

"""A segment held through a bind mount of /dev/shm is held: in a mount namespace the test
makes, with its own tmpfs on /dev/shm and that tmpfs bound again elsewhere, a process holds
a vLLM segment open by the other path (as a container does). `down`'s cleanup and
doctor's scan judge it by (device, inode) and leave it; an orphan beside it goes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]

INSIDE = r"""
import json, subprocess, sys, time
from deskside.doctor.shm import orphans, segments_of
from deskside.facts.base import gather
from deskside.facts.shm import shm
from deskside.records.run import RunNode, RunRecord
from deskside.runtime.nodes import clean_shm
from deskside.transport.local import LocalTransport

bound = sys.argv[1]
for name in ("psm_held", "psm_orphan"):
    with open(f"/dev/shm/{name}", "wb") as f:
        f.write(b"x" * 4096)
holder = subprocess.Popen(
    [sys.executable, "-c",
     "import sys, time; f = open(sys.argv[1], 'rb'); print('ready', flush=True); time.sleep(60)",
     f"{bound}/psm_held"],
    stdout=subprocess.PIPE, text=True)
assert holder.stdout.readline().strip() == "ready"
fact = shm()
scan = gather(LocalTransport(), fact).result(fact)
doctor = sorted(s.name for s in orphans(segments_of(scan)[0]))
node = RunNode(name="n0", role="head", node_rank=0, address="127.0.0.1", ssh=None,
               recipe_dir="/x")
run = RunRecord(recipe="r.yaml", recipe_name="r", runtime="local", control="process",
                runtime_kind="native", unit="deskside-r.service", compose_project="deskside-r",
                api_url="http://127.0.0.1:8000", proxy_url=None, served_names=["m"],
                started_at="2026-01-01T00:00:00+00:00", nodes=[node], shm_before=[],
                shm_inodes=[])
removed = clean_shm(LocalTransport(), run)
import os
left = sorted(os.listdir("/dev/shm"))
holder.kill()
print(json.dumps({"doctor": doctor, "removed": removed, "left": left}))
"""


def test_a_segment_held_through_a_bind_mount_stays(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare")
    bound = tmp_path / "bound-shm"
    bound.mkdir()
    script = (
        "mount -t tmpfs -o size=16m,mode=1777 deskside-test-shm /dev/shm "
        f'&& mount --bind /dev/shm "{bound}" '
        f'&& exec "{sys.executable}" -c "$1" "{bound}"'
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", INSIDE],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    import json

    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["doctor"] == ["psm_orphan"]
    assert answer["removed"] == ["psm_orphan"]
    assert answer["left"] == ["psm_held"]

"""A state file that names a live foreign process is never acted on without the whole
identity: in a PID namespace this test creates (`unshare --pid --fork --mount-proc`, its own
/proc), a process deskside did not start (titled like an engine, `vllm`) is named by a run's
node state (as its engine, and as its proxy service) and by a replica set's proxy record,
with a pid but no run tag, with an empty tag, or with no start time. `down`, the guard,
`watch`'s recovery (a restart), doctor with `--fix` and a replica set's `down` run on each,
inside the namespace: the foreign process is alive after every one, and each says why it
did nothing. A process with a whole record (pid, start time, tag) is stopped by `down`.

Everything the paths could signal lives in the namespace; its last process dies with it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from ..cli_process import ROOT

pytestmark = pytest.mark.integration

PATHS = {"down", "guard", "recovery", "doctor --fix", "replica set down"}


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True)
    return r.returncode == 0


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    if not _namespaces_work():
        pytest.skip("needs `unshare --pid --fork --mount-proc` (root, or user namespaces)")
    home = tmp_path_factory.mktemp("pidns") / "home"
    env = {
        **os.environ,
        "DESKSIDE_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
    }
    env.pop("DESKSIDE_RUN", None)
    r = subprocess.run(
        [
            "unshare",
            "--pid",
            "--fork",
            "--mount-proc",
            sys.executable,
            "-m",
            "tests.integration.pidns_identity",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    data: dict[str, object] = json.loads(r.stdout.strip().splitlines()[-1])
    return data


def test_every_path_leaves_the_foreign_process_alone(outcome: dict[str, object]) -> None:
    results = outcome["results"]
    assert isinstance(results, list)
    seen = {(r["path"], r["record"]) for r in results}
    for record in ("no tag", "empty tag", "no start"):
        for path in PATHS - {"replica set down"}:
            assert (path, f"{record} (engine state)") in seen
            assert (path, f"{record} (service state)") in seen
    assert ("replica set down", "empty tag (replica set's proxy)") in seen
    assert ("replica set down", "no start (replica set's proxy)") in seen
    for r in results:
        assert r["alive"], r  # the foreign process outlived every path
    assert {r["path"] for r in results} == PATHS


def test_each_path_says_why(outcome: dict[str, object]) -> None:
    results = outcome["results"]
    assert isinstance(results, list)
    for r in results:
        outcome_text, path, record = r["outcome"], r["path"], r["record"]
        if path == "doctor --fix":
            # reported as an engine of no live run, and never fixed (signalled)
            assert "('foreign-engine', False)" in outcome_text, r
            continue
        if "empty tag" in record and "proxy" not in record:
            assert "is not one deskside makes" in outcome_text, r  # the state is not trusted
            continue
        if path == "guard" and "service state" in record:
            assert outcome_text == "returned None", r  # the guard stops engines only
            continue
        if path == "recovery" and "service state" in record:
            continue  # no engine recorded: the restart stops nothing, its services untouched
        assert "not signalled" in outcome_text, r
        why = {"no tag": "no run tag", "empty tag": "run tag is empty", "no start": "no start time"}
        assert why[record.split(" (")[0]] in outcome_text, r


def test_a_whole_record_is_stopped(outcome: dict[str, object]) -> None:
    assert outcome["whole"] == {"leftovers": [], "alive": False}
